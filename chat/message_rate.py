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

DRF reads a user's history of posts from the cache and writes it back with the
new one: posts that arrive together (several tabs, a script, two web
processes) all read the same history, and each was let in. So a user's posts
are counted one at a time: the check holds a lock in the same cache (`add`,
atomic in Redis and in the process's memory) for its read and its write.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from django.core.cache import cache
from rest_framework.throttling import ScopedRateThrottle

from chat.exceptions import RateLimited

logger = logging.getLogger(__name__)


# How long a check may hold a user's lock: it takes a read and a write, so a
# holder still there after this has died, and the lock lapses.
LOCK_S = 2
LOCK_POLL_S = 0.002


class ScopedThrottle(ScopedRateThrottle):
    """ScopedRateThrottle (the view's `throttle_scope`), one request of a user counted at a time.

    It fails open when its cache is down, or when the user's lock cannot be had
    within LOCK_S.
    """

    def allow_request(self, request: Any, view: Any) -> bool:
        scope = getattr(view, self.scope_attr, None)
        user = getattr(request, "user", None)
        who = user.pk if user is not None and user.is_authenticated else self.get_ident(request)
        try:
            with _counted_alone(f"throttle-lock:{scope}:{who}"):
                return super().allow_request(request, view)
        except Exception as exc:
            logger.warning("%s rate limit not checked (its cache: %s)", scope, exc)
            return True


class MessageRateThrottle(ScopedThrottle):
    """The message rate limit: its views' scope is `messages`."""


@contextmanager
def _counted_alone(lock: str) -> Iterator[None]:
    """Hold `lock` in the throttle's cache, across threads and processes; TimeoutError if taken."""
    mine = uuid.uuid4().hex
    deadline = time.monotonic() + LOCK_S
    while not cache.add(lock, mine, timeout=LOCK_S):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{lock} held for over {LOCK_S} s")
        time.sleep(LOCK_POLL_S)
    try:
        yield
    finally:
        if cache.get(lock) == mine:  # not after it lapsed and another took it
            cache.delete(lock)


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
