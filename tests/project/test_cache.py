"""The Redis cache: one client and connection pool for all of a process's threads."""

from __future__ import annotations

import threading

import pytest
from django.core.cache import CacheHandler

pytestmark = pytest.mark.redis


def test_every_thread_uses_the_processs_one_client(redis_url):
    # Django keeps a cache object per thread; under ASGI each request has a thread.
    caches = CacheHandler(
        {"default": {"BACKEND": "project.cache.ProcessRedisCache", "LOCATION": redis_url}}
    )
    clients, values = [], []

    def request(number: int) -> None:
        cache = caches["default"]
        cache.set(f"count-{number}", number)
        values.append(cache.get(f"count-{number}"))
        clients.append(cache._cache)

    for number in range(5):
        thread = threading.Thread(target=request, args=(number,))
        thread.start()
        thread.join()
    assert sorted(values) == [0, 1, 2, 3, 4]
    assert len({id(client) for client in clients}) == 1
    pool = clients[0]._get_connection_pool(True)
    assert pool._created_connections == 1  # one connection, taken in turn by each thread
