"""Django's Redis cache with one connection pool per process, not one per thread.

Django keeps a cache object per thread, and each makes its own redis-py
client and connection pool. Under ASGI every request's synchronous code runs
on a thread of its own (asgiref's per-request executor), so every POST that
checked the message rate (the only cache user) opened a new TCP connection to
Redis and said HELLO, and dropped it at the end: a tenth of the web process's
CPU per posted message. Here the client, and so its pool, is shared by the
process's threads (redis-py's pool is thread-safe, and starts afresh in a
forked child).
"""

from __future__ import annotations

import re
import threading
from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from django.utils.functional import cached_property

_clients: dict[str, RedisCacheClient] = {}
_lock = threading.Lock()


class ProcessRedisCache(RedisCache):
    """RedisCache whose client (and connection pool) is the process's, per LOCATION and OPTIONS."""

    def __init__(self, server: str | list[str], params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._locations = re.split("[;,]", server) if isinstance(server, str) else server
        self._client_options: dict[str, Any] = params.get("OPTIONS", {})

    @cached_property
    def _cache(self) -> RedisCacheClient:
        key = repr((self._locations, sorted(self._client_options.items())))
        with _lock:
            client = _clients.get(key)
            if client is None:
                client = _clients[key] = RedisCacheClient(self._locations, **self._client_options)
        return client
