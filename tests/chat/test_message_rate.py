"""The message rate limit: posts that arrive together get the budget, not one each.

Each test runs on both caches the limit keeps its counts in: the process's
memory (the embedded default: a lock around DRF's check) and Redis (one
script per post).
"""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from django.core.cache import cache, caches
from rest_framework.throttling import ScopedRateThrottle

from chat.exceptions import RateLimited
from chat.message_rate import MessageRateThrottle, message_rate_check
from tests.plugins.services import free_port

pytestmark = pytest.mark.django_db

POSTS = 12
BUDGET = 5
MESSAGES_VIEW = SimpleNamespace(throttle_scope="messages")


@pytest.fixture(params=["memory", "redis"])
def rate_cache(request, settings):
    """The default cache: the process's memory, or a real Redis as REDIS_URL makes it."""
    if request.param == "redis":
        settings.CACHES = {
            "default": {
                "BACKEND": "project.cache.RedisCache",
                "LOCATION": request.getfixturevalue("redis_url"),
                "KEY_PREFIX": "rate-test",
            }
        }
    return request.param


@pytest.fixture
def slow_cache(rate_cache, monkeypatch):
    """Each read of the cache takes as long as a round trip to a busy Redis."""
    backend = type(caches["default"])  # one object per thread, all of this class
    read = backend.get

    def get(self, *args, **kwargs):
        value = read(self, *args, **kwargs)
        time.sleep(0.02)  # the round trip itself: posts overlap in it, as they do on Redis
        return value

    monkeypatch.setattr(backend, "get", get)
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"messages": f"{BUDGET}/min"})
    cache.clear()
    yield
    cache.clear()


def test_posts_at_once_are_allowed_the_budget_and_no_more(user, slow_cache):
    together = threading.Barrier(POSTS)

    def post(_: int) -> bool:
        together.wait()
        try:
            message_rate_check(user)
        except RateLimited:
            return False
        return True

    with ThreadPoolExecutor(POSTS) as pool:
        allowed = list(pool.map(post, range(POSTS)))
    assert allowed.count(True) == BUDGET


def test_the_budget_is_counted_after_a_burst_as_before(user, slow_cache):
    for _ in range(BUDGET):
        message_rate_check(user)
    with pytest.raises(RateLimited) as refused:
        message_rate_check(user)
    assert 0 < refused.value.details["retry_after"] <= 60


def test_a_post_one_window_old_no_longer_counts(user, rate_cache, monkeypatch):
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"messages": f"{BUDGET}/min"})
    # DRF's throttle reads the time through its `timer`: the window moves when that clock
    # does, exactly, rather than after a sleep that a loaded machine stretches (a minute's
    # window, so that the cache's own expiry, in real time, is not reached meanwhile).
    clock = SimpleNamespace(now=time.time())
    monkeypatch.setattr(ScopedRateThrottle, "timer", lambda self: clock.now)
    cache.clear()
    for _ in range(BUDGET):
        message_rate_check(user)
    throttle = MessageRateThrottle()
    assert not throttle.allow_request(SimpleNamespace(user=user, META={}), MESSAGES_VIEW)
    # DRF's wait: until the oldest post (made just now) leaves the minute's window.
    assert throttle.wait() == pytest.approx(60)
    clock.now += 59.9
    with pytest.raises(RateLimited) as refused:
        message_rate_check(user)  # still inside the window
    assert refused.value.details["retry_after"] == 1
    clock.now += 0.2
    message_rate_check(user)  # the window has moved past the burst
    cache.clear()


def test_a_budget_of_none_refuses_every_post(user, rate_cache, monkeypatch):
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"messages": "0/min"})
    cache.clear()
    with pytest.raises(RateLimited) as refused:
        message_rate_check(user)
    assert refused.value.details["retry_after"] == 60


def test_counts_that_drf_left_in_the_cache_do_not_get_in_the_way(user, rate_cache, monkeypatch):
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"messages": f"{BUDGET}/min"})
    cache.clear()
    # What DRF's own check stored under its key before the script counted in Redis.
    cache.set(f"throttle_messages_{user.pk}", [time.time()] * 2, 60)
    allowed = 0
    with contextlib.suppress(RateLimited):
        for _ in range(BUDGET + 1):
            message_rate_check(user)
            allowed += 1
    # In memory DRF reads its own history; in Redis the script keeps a set of its own.
    assert allowed == (BUDGET - 2 if rate_cache == "memory" else BUDGET)
    cache.clear()


def test_a_redis_that_is_down_lets_the_post_through_and_says_so(user, settings, caplog):
    settings.CACHES = {
        "default": {
            "BACKEND": "project.cache.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",  # nothing listens there
            "OPTIONS": {"socket_connect_timeout": 1},
        }
    }
    message_rate_check(user)  # no RateLimited, no error
    assert "messages rate limit not checked" in caplog.text
