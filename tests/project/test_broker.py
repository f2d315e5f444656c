"""project/broker.py: the channel's Redis client, made once for its pool, on a real Redis.

kombu built a new `redis.Redis` for every command a channel sent outside its
consuming loop (each acknowledgement, each task sent). The channel here makes
one a connection pool; messages still go and come back, are acknowledged,
and after the pool is dropped (as when the connection to Redis is lost) the
next command reaches Redis through a client of the new pool.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from kombu import Connection

pytestmark = pytest.mark.redis


@pytest.fixture
def clients_made(monkeypatch) -> list[Any]:
    """Every sync `redis.Redis` made, in order (counted only)."""
    made: list[Any] = []
    real = redis.Redis.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(redis.Redis, "__init__", counted)
    return made


def test_a_channel_sends_and_acknowledges_through_one_client_a_pool(redis_url, clients_made):
    with Connection(redis_url, transport="project.broker:Transport") as connection:
        queue = connection.SimpleQueue("broker-client-test")
        channel = queue.channel
        for n in range(20):
            queue.put({"n": n})
        got = []
        for _ in range(20):
            message = queue.get(timeout=5)
            got.append(message.payload["n"])
            message.ack()
        assert got == list(range(20))
        sync = [c for c in clients_made if c.connection_pool is channel.pool]
        # 20 sends and 20 acknowledgements: one client (kombu made one for each).
        assert len(sync) == 1, len(sync)
        with channel.conn_or_acquire() as client:
            assert client.llen("broker-client-test") == 0
            assert client.hlen("unacked") == 0

        # The pool dropped, as kombu does when the connection is lost: the next
        # command goes through a client of the new pool, and arrives.
        old = channel.pool
        channel._disconnect_pools()
        queue.put({"n": "after"})
        assert channel.pool is not old
        message = queue.get(timeout=5)
        assert message.payload == {"n": "after"}
        message.ack()
        with channel.conn_or_acquire() as client:
            assert client.connection_pool is channel.pool
        assert len([c for c in clients_made if c.connection_pool is channel.pool]) == 1
        queue.close()
