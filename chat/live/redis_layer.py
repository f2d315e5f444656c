"""channels_redis' layer, sending a commit's events from the committing thread in two round trips.

channels_redis' `group_send` is a coroutine, so a task thread had to hand its
events to a thread with an event loop (chat/live/sender.py), and it takes four
round trips to Redis for each message (expire the group's old members, read
the members, expire each member's old messages, then a script that adds the
message). In a worker, that thread waited for the GIL behind the run's own
thread at every round trip: an event took 10 to 20 ms from its commit to the
client, the first text delta included (docs/performance.md, round six).

`group_send_now` is the same send, blocking, for a thread with no loop: one
pipeline reads every group's members, one script adds every message in
order, each with a score above the one before (a receiver pops a channel's
messages by score). The committing thread sends its own events right after
the commit, over a connection of its own from a per-process pool.

What is stored, and how a receiver reads it, is channels_redis' own: the web
processes run this class and receive with channels_redis' code.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import redis
import redis.asyncio
from channels_redis.core import RedisChannelLayer as _RedisChannelLayer
from channels_redis.utils import create_pool
from django.core.exceptions import ImproperlyConfigured

from chat.live.sender import GroupMessage

# Messages whose scores in one channel must differ: a score is a double near
# 2**31, so a step of a microsecond is several units of its last place.
_SCORE_STEP = 1e-6

# The blocking sends wait this long at most for each step (a connection from the
# pool, the connect, each reply): they hold up a run's thread, and Redis
# answers them in well under a millisecond.
SEND_TIMEOUT_S = 1.0
# Connections a process's blocking sends keep to each Redis host, at most: a send
# holds one for two round trips, so a few serve a worker's fifty threads.
SEND_CONNECTIONS = 10

# KEYS: each message's channel key, in order; ARGV: the messages, then each
# one's score, then each key's capacity, then the time before which a channel's
# messages have expired, then the keys' expiry in seconds. A channel that is
# full drops the message, as channels_redis' own group_send does.
_ADD_IN_ORDER = """
local count = #KEYS
local expired_before = ARGV[3 * count + 1]
local expiry = ARGV[3 * count + 2]
local cleaned = {}
local over_capacity = 0
for i = 1, count do
    local key = KEYS[i]
    if not cleaned[key] then
        redis.call('ZREMRANGEBYSCORE', key, 0, expired_before)
        cleaned[key] = true
    end
    if redis.call('ZCARD', key) < tonumber(ARGV[2 * count + i]) then
        redis.call('ZADD', key, ARGV[count + i], ARGV[i])
        redis.call('EXPIRE', key, expiry)
    else
        over_capacity = over_capacity + 1
    end
end
return over_capacity
"""


class RedisChannelLayer(_RedisChannelLayer):
    """channels_redis' RedisChannelLayer with `group_send_now`, a blocking send of a list."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if any("master_name" in host for host in self.hosts):
            raise ImproperlyConfigured(
                "chat.live.redis_layer.RedisChannelLayer takes Redis addresses, not Sentinel: "
                "use channels_redis.core.RedisChannelLayer for a Sentinel setup"
            )
        self._score_lock = threading.Lock()
        self._last_score = 0.0
        self._clients_lock = threading.Lock()
        self._clients: dict[int, redis.Redis] = {}
        self._clients_pid: int | None = None

    def group_send_now(
        self, messages: Sequence[GroupMessage], *, ended_runs: Sequence[str] = ()
    ) -> int:
        """Send each `(group, message)` to its group's channels, in order; from a thread without a loop.

        Blocks for two round trips to Redis (one pipeline, one script) per
        host involved. `ended_runs` are published on `run_ends_channel()` in
        the first pipeline (chat/live/run_ends.py: the web processes' waits).
        Returns how many deliveries were dropped because a channel was full;
        raises what redis-py raises.
        """
        if not messages and not ended_runs:
            return 0
        members: dict[str, list[str]] = {}
        by_host = self._groups_by_host(messages)
        if ended_runs:
            by_host.setdefault(0, [])
        for index, groups in by_host.items():
            pipe = self._client(index).pipeline(transaction=False)
            for group in groups:
                key = self._group_key(group)
                pipe.zremrangebyscore(key, min=0, max=int(time.time()) - self.group_expiry)
                pipe.zrange(key, 0, -1)
            if index == 0:
                for run_id in ended_runs:
                    pipe.publish(self.run_ends_channel(), run_id)
            replies = pipe.execute()
            for group, channels in zip(groups, replies[1 : 2 * len(groups) : 2], strict=True):
                members[group] = [channel.decode("utf8") for channel in channels]
        dropped = 0
        for index, (keys, arguments) in self._additions(members, messages).items():
            dropped += int(self._client(index).eval(_ADD_IN_ORDER, len(keys), *keys, *arguments))
        return dropped

    def run_ends_channel(self) -> str:
        """The pub/sub channel on the first host where the workers tell of every run's end."""
        return f"{self.prefix}:run-ends"

    def run_ends_client(self) -> redis.asyncio.Redis:
        """A client of its own (on the caller's loop) for the subscription to `run_ends_channel`."""
        return redis.asyncio.Redis(connection_pool=create_pool(self.hosts[0]))

    def _groups_by_host(self, messages: Sequence[GroupMessage]) -> dict[int, list[str]]:
        by_host: dict[int, list[str]] = defaultdict(list)
        for group in dict.fromkeys(group for group, _ in messages):
            by_host[self.consistent_hash(group)].append(group)
        return by_host

    def _additions(
        self, members: dict[str, list[str]], messages: Sequence[GroupMessage]
    ) -> dict[int, tuple[list[bytes], list[Any]]]:
        """Per host: the channel keys and the script's arguments, every message in order."""
        now = time.time()
        entries: dict[int, list[tuple[bytes, bytes, float, int]]] = defaultdict(list)
        for group, message in messages:
            by_host, serialized, capacities = self._map_channel_keys_to_connection(
                members[group], message
            )
            for index, keys in by_host.items():
                for key in keys:
                    entries[index].append((key, serialized[key], self._score(now), capacities[key]))
        additions = {}
        for index, rows in entries.items():
            keys = [key for key, _, _, _ in rows]
            arguments: list[Any] = [data for _, data, _, _ in rows]
            arguments += [score for _, _, score, _ in rows]
            arguments += [capacity for _, _, _, capacity in rows]
            arguments += [int(now) - int(self.expiry), self.expiry]
            additions[index] = (keys, arguments)
        return additions

    def _score(self, now: float) -> float:
        """`now`, or just above the last score this layer gave, whichever is higher."""
        with self._score_lock:
            self._last_score = max(now, self._last_score + _SCORE_STEP)
            return self._last_score

    def _client(self, index: int) -> redis.Redis:
        """A blocking client for host `index`: one pool per process, shared by its threads."""
        if self._clients_pid != os.getpid():
            # A forked child must not share its parent's sockets, nor inherit a lock
            # that a thread of the parent held at the fork.
            self._clients_lock, self._score_lock = threading.Lock(), threading.Lock()
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
