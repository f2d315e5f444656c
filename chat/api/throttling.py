"""The message rate limit, one budget per user for the REST API and the WebSocket.

DRF's ScopedRateThrottle keeps its history in Django's cache: Redis when
REDIS_URL is set (so every web process counts against the same budget), the
process's memory otherwise. A cache that cannot be reached lets the message
through and logs it: a Redis outage must not turn posting into a 500, and the
post itself still works without Redis (docs/configuration.md).
"""

from __future__ import annotations

import logging
from typing import Any

from rest_framework.throttling import ScopedRateThrottle

logger = logging.getLogger(__name__)


class MessageRateThrottle(ScopedRateThrottle):
    """ScopedRateThrottle (scope `messages`) that fails open when its cache is down."""

    def allow_request(self, request: Any, view: Any) -> bool:
        try:
            return super().allow_request(request, view)
        except Exception as exc:
            logger.warning("message rate limit not checked, its cache is unreachable: %s", exc)
            return True
