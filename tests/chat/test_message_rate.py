"""The message rate limit: posts that arrive together get the budget, not one each."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core.cache import cache, caches
from rest_framework.throttling import ScopedRateThrottle

from chat.exceptions import RateLimited
from chat.message_rate import message_rate_check

pytestmark = pytest.mark.django_db

POSTS = 12
BUDGET = 5


@pytest.fixture
def slow_cache(monkeypatch):
    """Each read of the cache takes as long as a round trip to a busy Redis."""
    backend = type(caches["default"])  # one object per thread, all of this class
    read = backend.get

    def get(self, *args, **kwargs):
        value = read(self, *args, **kwargs)
        time.sleep(0.02)
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
