"""The message rate limit, one budget per user for the REST API and the WebSocket.

DRF's ScopedRateThrottle keeps its history in Django's cache: Redis when
REDIS_URL is set (so every web process counts against the same budget), the
process's memory otherwise. A cache that cannot be reached lets the message
through and logs it: a Redis outage must not turn posting into a 500, and the
post itself still works without Redis (docs/configuration.md).

The REST API counts a post with DRF's throttle machinery (`MessageRateThrottle`
on its views); the socket, which has no DRF request, with `message_rate_check`.
Both sit on this module, so neither door imports the other. Other costly reads
of the API have budgets of their own, kept the same way (`ScopedThrottle`
with the view's scope: `compare`, TOOLCHAT_COMPARE_RATE).
"""

from __future__ import annotations

import logging
import math
from types import SimpleNamespace
from typing import Any

from rest_framework.throttling import ScopedRateThrottle

from chat.exceptions import RateLimited

logger = logging.getLogger(__name__)


class ScopedThrottle(ScopedRateThrottle):
    """ScopedRateThrottle (the view's `throttle_scope`) that fails open when its cache is down."""

    def allow_request(self, request: Any, view: Any) -> bool:
        try:
            return super().allow_request(request, view)
        except Exception as exc:
            logger.warning(
                "%s rate limit not checked, its cache is unreachable: %s", self.scope, exc
            )
            return True


class MessageRateThrottle(ScopedThrottle):
    """The message rate limit: its views' scope is `messages`."""


def message_rate_check(user: Any) -> None:
    """Count one message against the user's budget; RateLimited (with the wait) once it is spent."""
    # The REST API's own throttle, same scope and cache key: one budget per user,
    # however the messages arrive.
    throttle = MessageRateThrottle()
    view = SimpleNamespace(throttle_scope="messages")
    if not throttle.allow_request(SimpleNamespace(user=user, META={}), view):
        wait = max(1, math.ceil(throttle.wait() or 1))
        raise RateLimited(
            f"Too many messages; try again in {wait} seconds.", details={"retry_after": wait}
        )
