"""channels_redis' layer, whose groups are Redis pub/sub channels, sent to in one round trip.

channels_redis keeps a group as a sorted set of member channels and a
message as a copy in each member's list: a send takes four round trips (expire
the group's old members, read them, expire each member's old messages, add
the copies), and a receiver holds a blocking pop of its own. Every stream a
web process served made a channel, joined the group, popped, woke its own pop
and left: five commands a request, which were the largest single entry in a
web process's profile under load (docs/gateway.md, round thirteen).

Here a group is a pub/sub channel (`group_channel`). `group_send_now`, a
blocking send for a thread with no loop (a task's commit), publishes a
commit's messages, in order, in one pipeline; each web process hears them on
one subscription per event loop (chat/live/subscription.py), which hands each
to the streams of the process that follow the group. The committing thread
sends its own events right after the commit, over a connection of its own
from a per-process pool.

A message is JSON (the events are). Only chat.live.subscription hears a
group: channels_redis' `group_add` and `receive` on this layer get nothing,
and toolchat uses neither with it (chat/live/streams.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Sequence
from typing import Any

import redis
import redis.asyncio
from channels_redis.core import RedisChannelLayer as _RedisChannelLayer
from channels_redis.utils import create_pool
from django.core.exceptions import ImproperlyConfigured

from chat.live.sender import GroupMessage

# The blocking sends wait this long at most for each step (a connection from the
# pool, the connect, each reply): they hold up a run's thread, and Redis
# answers them in well under a millisecond.
SEND_TIMEOUT_S = 1.0
# Connections a process's blocking sends keep to each Redis host, at most: a send
# holds one for a round trip, so a few serve a worker's fifty threads.
SEND_CONNECTIONS = 10


class RedisChannelLayer(_RedisChannelLayer):
    """channels_redis' RedisChannelLayer with `group_send_now`, a blocking send of a list."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if any("master_name" in host for host in self.hosts):
            raise ImproperlyConfigured(
                "chat.live.redis_layer.RedisChannelLayer takes Redis addresses, not Sentinel: "
                "use channels_redis.core.RedisChannelLayer for a Sentinel setup"
            )
        self._clients_lock = threading.Lock()
        self._clients: dict[int, redis.Redis] = {}
        self._clients_pid: int | None = None

    def group_send_now(
        self, messages: Sequence[GroupMessage], *, ended_runs: Sequence[str] = ()
    ) -> None:
        """Publish each `(group, message)` on its group's channel, in order; from a thread without a loop.

        One round trip to Redis (a pipeline of PUBLISHes on the first host):
        the messages, then `ended_runs` on `run_ends_channel()`
        (chat/live/run_ends.py: the web processes' waits). The web processes
        hear them on their one subscription a loop (chat/live/subscription.py).
        A follower whose queue is full drops on its own side (its stream
        reads the database); raises what redis-py raises.
        """
        if not messages and not ended_runs:
            return
        pipe = self._client(0).pipeline(transaction=False)
        for group, message in messages:
            pipe.publish(self.group_channel(group), json.dumps(message, separators=(",", ":")))
        for run_id in ended_runs:
            pipe.publish(self.run_ends_channel(), run_id)
        pipe.execute()

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        """`group_send_now` of one message, for a caller on a loop."""
        await asyncio.to_thread(self.group_send_now, [(group, message)])

    def group_channel(self, group: str) -> str:
        """The pub/sub channel on the first host where a group's messages are published."""
        return f"{self.prefix}:group:{group}"

    def run_ends_channel(self) -> str:
        """The pub/sub channel on the first host where the workers tell of every run's end."""
        return f"{self.prefix}:run-ends"

    def subscription_client(self) -> redis.asyncio.Redis:
        """A client of its own, on the caller's loop, for its subscription (chat/live/subscription.py)."""
        return redis.asyncio.Redis(connection_pool=create_pool(self.hosts[0]))

    def _client(self, index: int) -> redis.Redis:
        """A blocking client for host `index`: one pool per process, shared by its threads."""
        if self._clients_pid != os.getpid():
            # A forked child must not share its parent's sockets, nor inherit a lock
            # that a thread of the parent held at the fork.
            self._clients_lock = threading.Lock()
            self._clients, self._clients_pid = {}, os.getpid()
        with self._clients_lock:
            client = self._clients.get(index)
            if client is None:
                client = self._clients[index] = redis.Redis(
                    connection_pool=_blocking_pool(self.hosts[index])
                )
            return client


def _blocking_pool(host: dict[str, Any]) -> redis.ConnectionPool:
    """channels_redis' `create_pool`, for redis-py's blocking client: a few connections, short waits."""
    host = dict(host)
    address = host.pop("address", None)
    limits = {"max_connections": SEND_CONNECTIONS, "timeout": SEND_TIMEOUT_S}
    if address is not None:
        pool = redis.BlockingConnectionPool.from_url(address, **host, **limits)
    else:
        pool = redis.BlockingConnectionPool(**host, **limits)  # type: ignore[no-untyped-call]
    # After from_url: options in the address's query string would win otherwise.
    pool.connection_kwargs.update(
        socket_timeout=SEND_TIMEOUT_S, socket_connect_timeout=SEND_TIMEOUT_S
    )
    return pool
