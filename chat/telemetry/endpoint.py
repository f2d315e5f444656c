"""`GET /metrics`: the Prometheus text format, for a scraper that may see it.

Off (404) unless configured; then a request passes with the bearer token
`TOOLCHAT_METRICS_TOKEN`, or from an address in `TOOLCHAT_METRICS_NETWORKS`
(CIDR blocks; the address is the connection's, `REMOTE_ADDR`: behind a proxy,
use the token). Anyone else gets 403, with nothing said about the metrics.
"""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from chat.telemetry.metrics import metrics_enabled, registry


def scraper_allowed(request: HttpRequest) -> bool:
    """Whether the request carries the metrics token or comes from an allowed network."""
    token = settings.TOOLCHAT_METRICS_TOKEN
    given = request.headers.get("Authorization", "")
    if token and hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return True
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(
        address in ipaddress.ip_network(network, strict=False)
        for network in settings.TOOLCHAT_METRICS_NETWORKS
    )


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The metrics of toolchat's processes, in Prometheus's text format."""
    if not metrics_enabled():
        raise Http404
    if not scraper_allowed(request):
        return HttpResponse("Forbidden.\n", status=403, content_type="text/plain")
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
