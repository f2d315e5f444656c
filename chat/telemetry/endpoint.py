"""`GET /metrics`: the Prometheus text format, for a scraper that may see it.

Off (404) unless configured; then a request passes with the bearer token
`TOOLCHAT_METRICS_TOKEN`, or from an address in `TOOLCHAT_METRICS_NETWORKS`.
Anyone else gets 403, with nothing said about the metrics.

The address that counts is the connection's own, the socket peer. Django
sees it as `REMOTE_ADDR`, which the ASGI server may have taken from a header
the client wrote: uvicorn does so by default for a connection from loopback
(`forwarded_allow_ips`), so anyone on the host could claim any network with
`X-Forwarded-For`. A request that carries a forwarding header (`FORWARDED_HEADERS`)
is therefore never let in by its address: behind a proxy, use the token.
"""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from chat.telemetry.metrics import metrics_enabled, registry

# The headers by which a proxy names its client, which ASGI servers may take as the
# connection's address (uvicorn's and daphne's X-Forwarded-For, hypercorn's Forwarded
# too; X-Real-IP is what nginx is often told to send, and daphne may be told to read).
FORWARDED_HEADERS = ("X-Forwarded-For", "Forwarded", "X-Real-IP")


def scraper_allowed(request: HttpRequest) -> bool:
    """Whether the request carries the metrics token or comes from an allowed network."""
    token = settings.TOOLCHAT_METRICS_TOKEN
    given = request.headers.get("Authorization", "")
    if token and hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return True
    address = _peer_address(request)
    return address is not None and any(
        address in ipaddress.ip_network(network, strict=False)
        for network in settings.TOOLCHAT_METRICS_NETWORKS
    )


def _peer_address(request: HttpRequest) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The connection's address, or None when it may be a forwarding header's claim."""
    if any(header in request.headers for header in FORWARDED_HEADERS):
        return None
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return None


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The metrics of toolchat's processes, in Prometheus's text format."""
    if not metrics_enabled():
        raise Http404
    if not scraper_allowed(request):
        return HttpResponse("Forbidden.\n", status=403, content_type="text/plain")
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
