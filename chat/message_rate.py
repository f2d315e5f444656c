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
are counted one at a time. In Redis, one script does the whole check (a
sorted set of the user's posts in the window: drop the old ones, count, add
this one if there is room), one round trip that Redis runs alone. Before it,
a lock in the cache around DRF's read and write took five round trips a post,
and posts of one user that arrived together polled for the lock: under 200
posts at once, a sixth of the web process's CPU (docs/performance.md, round
six). In the process's memory (no Redis) a lock (`add`, atomic there too)
still serializes DRF's own check.
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

from django.core.cache import cache, caches
from rest_framework.throttling import ScopedRateThrottle

from chat.exceptions import RateLimited
from project.cache import RedisCache

logger = logging.getLogger(__name__)


# How long a check may hold a user's lock: it takes a read and a write, so a
# holder still there after this has died, and the lock lapses.
LOCK_S = 2
LOCK_POLL_S = 0.002

# KEYS[1]: the user's posts in the window, scored by time; ARGV: now, the
# window in seconds, the budget, a unique member for this post. Returns
# {allowed, posts in the window, the oldest one's time when refused (now, when
# a budget of 0 refuses an empty window)}. As DRF counts: a post exactly one
# window old has left it.
_COUNT_IN_WINDOW = """
local now = tonumber(ARGV[1])
local duration = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - duration)
local count = redis.call('ZCARD', KEYS[1])
if count >= tonumber(ARGV[3]) then
    local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {0, count, oldest[2] or ARGV[1]}
end
redis.call('ZADD', KEYS[1], now, ARGV[4])
redis.call('EXPIRE', KEYS[1], math.ceil(duration))
return {1, count + 1, '0'}
"""


class ScopedThrottle(ScopedRateThrottle):
    """ScopedRateThrottle (the view's `throttle_scope`), one request of a user counted at a time.

    It fails open when its cache is down, or when the user's lock cannot be had
    within LOCK_S.
    """

    def allow_request(self, request: Any, view: Any) -> bool:
        scope = getattr(view, self.scope_attr, None)
        self.window: tuple[int, float] | None = None
        try:
            backend = caches["default"]
            if isinstance(backend, RedisCache):
                return self._counted_in_redis(backend, request, view)
            user = getattr(request, "user", None)
            who = user.pk if user is not None and user.is_authenticated else self.get_ident(request)
            with _counted_alone(f"throttle-lock:{scope}:{who}"):
                return super().allow_request(request, view)
        except Exception as exc:
            logger.warning("%s rate limit not checked (its cache: %s)", scope, exc)
            return True

    def _counted_in_redis(self, backend: RedisCache, request: Any, view: Any) -> bool:
        """DRF's check and count, as one script in Redis."""
        # What ScopedRateThrottle.allow_request sets up before its cache read.
        self.scope = getattr(view, self.scope_attr, None)
        if not self.scope:
            return True
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        key = self.get_cache_key(request, view) if self.rate is not None else None
        if key is None:
            return True
        self.now = self.timer()
        allowed, count, oldest = backend.redis().eval(
            _COUNT_IN_WINDOW,
            1,
            # Not DRF's key: that one holds a pickled list where DRF counted.
            backend.make_and_validate_key(f"rate:{key}"),
            repr(self.now),
            self.duration,
            self.num_requests,
            uuid.uuid4().hex,
        )
        self.window = (int(count), float(oldest))
        return bool(allowed)

    def wait(self) -> float | None:
        """DRF's wait, from what the script counted where it counted."""
        if self.window is None or self.num_requests is None or self.duration is None:
            return super().wait()
        count, oldest = self.window
        available = self.num_requests - count + 1
        if available <= 0:
            return None
        return (self.duration - (self.now - oldest)) / float(available)


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
