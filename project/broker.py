"""Celery's Redis transport, made to survive the loss of Redis itself.

When the connection to Redis breaks, Celery's consumer closes its channel,
reconnects (for as long as it takes) and opens a new one. But the old
channel still has work to do after it is closed: on closing, it gives back
("restores") the tasks the worker had taken, and each task the worker was
running when Redis went away is acknowledged on it when it finishes. Both
need a Redis client, and kombu builds one from the connection's settings,
which the connection dropped when it was released: `AttributeError:
'NoneType' object has no attribute 'hostname'` (or `'client'`). Celery
calls that an unrecoverable error and the worker exits; with nothing to
restart it, every later turn waits forever (celery/celery#8030, kombu#970;
as of kombu 5.7.0, the newest).

Here a channel remembers the settings it connected with, so that what it
still has to do reaches Redis like everything else: while Redis is down it
fails with a connection error, which Celery expects and logs; once Redis is
back, a finished task's acknowledgement lands, and the task is not delivered
again. A task whose acknowledgement was lost stays in Redis's "unacked" set
and is redelivered after `CELERY_VISIBILITY_TIMEOUT`; the turn engine's
tasks are safe to run twice (a finished run, or a finished tool call, is not
run again). docs/deploy.md tells the whole story of an outage.

And a channel makes its Redis client once for its connection pool, not for
every command: kombu's `conn_or_acquire()` built a new `redis.Redis` (and its
table of some two hundred reply callbacks) for each acknowledgement and each
task sent, 8 to 10% of a worker's CPU under load (docs/performance.md, round
sixteen). A client holds no connection of its own (it takes one from the
pool for each command), so one is shared by the channel's threads as
redis-py allows; when kombu drops the pool (the connection lost), the next
command makes a client for the new one.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis
from redis.exceptions import ConnectionError as RedisConnectionError


class Channel(redis.Channel):
    """kombu's Redis channel, still able to reach Redis after its connection was released."""

    _remembered: dict[bool, dict[str, Any]]

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        transport = self.connection
        remembered = self.__dict__.setdefault("_remembered", {})
        if transport is not None and transport.client is not None:
            # (kombu's stubs do not declare _connparams.)
            params: dict[str, Any] = super()._connparams(asynchronous=asynchronous)  # type: ignore[misc]
            remembered[asynchronous] = dict(params)
            return params
        if asynchronous in remembered:
            return dict(remembered[asynchronous])
        # Never connected: nothing to remember, and nothing this channel owes Redis.
        raise RedisConnectionError("the broker connection was released")

    def _create_client(self, asynchronous: bool = False) -> Any:
        """kombu's client for a command: the one made for the channel's current pool."""
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[misc]
        pool = self.pool
        client = self.__dict__.get("_pool_client")
        if client is None or client.connection_pool is not pool:
            client = super()._create_client()  # type: ignore[misc]
            self.__dict__["_pool_client"] = client
        return client


class Transport(redis.Transport):
    """kombu's Redis transport (CELERY_BROKER_TRANSPORT), with the channel above."""

    Channel = Channel
