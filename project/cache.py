"""Django's Redis cache with one client, and so one pool of connections, per process.

Django makes a cache object per thread and per async context (Django ticket
#35651), and its Redis client keeps its connection pool on that object: under
ASGI every request and every WebSocket therefore opened a Redis connection of
its own (a connect and the client's handshake before the first command) and
left it to the garbage collector. The rate limit reads and writes the cache on
every post, so that was a connect per message. Here the client, which holds
nothing but its pools, belongs to the process: one per server list and
options, shared by every cache object. redis-py's pools are safe across threads
and remake their connections after a fork.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient

_clients: dict[str, RedisCacheClient] = {}
_clients_lock = threading.Lock()


class RedisCache(DjangoRedisCache):
    """`django.core.cache.backends.redis.RedisCache`, with the process's shared client."""

    def __init__(self, server: str | list[str], params: dict[str, Any]) -> None:
        super().__init__(server, params)
        servers = re.split("[;,]", server) if isinstance(server, str) else list(server)
        options = params.get("OPTIONS", {})
        key = repr((servers, sorted(options.items())))
        client = _clients.get(key)
        if client is None:
            with _clients_lock:
                client = _clients.get(key)
                if client is None:
                    client = _clients[key] = RedisCacheClient(servers, **options)
        # Django's own lazily made client, given before it is made.
        self.__dict__["_cache"] = client
