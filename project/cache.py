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

Django's client also makes a `redis.Redis` around its pool for every command
(`get_client`), and redis-py builds its table of reply callbacks in each one:
a tenth of the rate check's CPU on every post. `SharedClient` makes one per
pool: a `redis.Redis` holds nothing but the pool and those tables, and is safe
across threads.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient


class SharedClient(RedisCacheClient):
    """Django's Redis cache client, with one `redis.Redis` per connection pool."""

    # Django's own, undeclared in its stubs.
    _client: Any
    _get_connection_pool: Callable[[bool], Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._redis_by_pool: dict[int, Any] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        pool = self._get_connection_pool(write)
        client = self._redis_by_pool.get(id(pool))
        if client is None:
            # Two threads may both make one; either serves, and the pool is the same.
            client = self._redis_by_pool[id(pool)] = self._client(connection_pool=pool)
        return client


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
                    client = _clients[key] = SharedClient(servers, **options)
        # Django's own lazily made client, given before it is made.
        self.__dict__["_cache"] = client

    def redis(self) -> Any:
        """The process's `redis.Redis` for writes: for what the cache API cannot do in one step."""
        client: SharedClient = self.__dict__["_cache"]
        return client.get_client(write=True)
