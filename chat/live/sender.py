"""Sending stored events to the channel layer, in commit order, without failing the caller.

A layer that can send from a thread without an event loop (`group_send_now`,
chat/live/redis_layer.py) is sent to by the committing thread itself, right
after its commit: no hand-off, so no wait for another thread to get the GIL
while the run's thread computes. After a failed send (Redis down or slow) the
live path is skipped for SEND_RETRY_S, so that a run does not wait on Redis at
every commit.

Any other layer has coroutines only. `async_to_sync(layer.group_send)` from a
worker thread makes a new event loop for every call, and channels_redis makes
a new connection pool (a TCP connection and its handshake) for every loop:
under 200 concurrent turns a tenth of a worker's CPU went there. For those, one
daemon thread per process runs one loop that keeps one pool, and a queue feeds
it the committed batches in commit order.

Either way the events are stored already: a client that misses one (Redis
down, the process exiting) reads it from the database on its next catch-up.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger(__name__)

# Batches waiting to be sent, at most; beyond it (Redis down for long) they are
# dropped from the live path, never from the database.
MAX_PENDING = 10_000
# After a send from the committing thread failed, how long those threads skip
# the live path (clients read the database meanwhile) before they try again:
# long enough that a Redis that does not answer holds up a run's commits once
# a second at most, short enough that a blip freezes no stream for long.
SEND_RETRY_S = 1.0

GroupMessage = tuple[str, dict[str, Any]]
"""A channel-layer message and the group it goes to: (group, message)."""
Batch = tuple[Any, list[GroupMessage]]  # (layer, [(group, message), ...])


class _Sender:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[Batch] | None = None

    def submit(self, layer: Any, messages: list[GroupMessage]) -> None:
        loop, queue = self._running()
        loop.call_soon_threadsafe(self._enqueue, queue, (layer, messages))

    def _running(self) -> tuple[asyncio.AbstractEventLoop, asyncio.Queue[Batch]]:
        with self._lock:
            # A forked child (Celery's prefork pool) has the parent's objects but
            # not its thread: it starts its own.
            if self._pid != os.getpid() or self._loop is None or self._queue is None:
                self._loop, self._queue = self._start()
                self._pid = os.getpid()
            return self._loop, self._queue

    def _start(self) -> tuple[asyncio.AbstractEventLoop, asyncio.Queue[Batch]]:
        loop = asyncio.new_event_loop()
        queue: asyncio.Queue[Batch] = asyncio.Queue(MAX_PENDING)
        thread = threading.Thread(
            target=loop.run_until_complete,
            args=(self._drain(queue),),
            name="toolchat-events",
            daemon=True,
        )
        thread.start()
        return loop, queue

    @staticmethod
    def _enqueue(queue: asyncio.Queue[Batch], batch: Batch) -> None:
        try:
            queue.put_nowait(batch)
        except asyncio.QueueFull:
            logger.warning("channel layer backlog full; live clients read these events later")

    @staticmethod
    async def _drain(queue: asyncio.Queue[Batch]) -> None:
        while True:
            layer, messages = await queue.get()
            for group, message in messages:
                try:
                    await layer.group_send(group, message)
                except Exception:
                    # The event is stored; a client that missed it gets it on resume.
                    logger.exception(
                        "could not send event %s to the channel layer",
                        _described([(group, message)]),
                    )


_sender = _Sender()
_now_skipped_until = 0.0  # the monotonic time until which `group_send_now` is not tried


def layer_send(layer: Any, messages: list[GroupMessage], *, ended_runs: Sequence[str] = ()) -> None:
    """Send `(group, message)` pairs to the layer in order; never raises.

    From this thread at once where the layer has `group_send_now` (which also
    publishes `ended_runs`, chat/live/run_ends.py); otherwise queued for the
    process's sender thread, and this returns at once.
    """
    if getattr(layer, "group_send_now", None) is None:
        _sender.submit(layer, messages)
        return
    global _now_skipped_until
    if time.monotonic() < _now_skipped_until:
        return
    try:
        layer.group_send_now(messages, ended_runs=ended_runs)
    except Exception:
        _now_skipped_until = time.monotonic() + SEND_RETRY_S
        logger.exception(
            "could not send events %s to the channel layer; live sends resume in %.0f s, "
            "and clients read these from the database",
            _described(messages),
            SEND_RETRY_S,
        )


def _described(messages: list[GroupMessage]) -> str:
    events = (message.get("event", {}) for _, message in messages)
    return ", ".join(f"{event.get('type')} #{event.get('seq')}" for event in events)
