"""A run's end, told at once to whoever in this process waits for it.

`POST …/messages/?wait=true` needs a run's end (or its pause for an
approval, `WAIT_ENDS`), not its events. Waiters
register here (`run_end_signal`); `run_end_notify` sets their events on their
own loops. Who calls it:

- in the embedded default (no Redis), every run ends in the web process
  itself: `events_publish` calls it when a terminal event commits, so the
  wait needs neither the channel layer nor a read of the database;
- with Redis, the worker that commits an end publishes the run's id on one
  pub/sub channel (`RedisChannelLayer.group_send_now`), and each web process
  keeps one subscription to it per event loop (`run_ends_listen`), which
  calls it. A wait joined and left a channel-layer group of its own before,
  five round trips to Redis and a receive loop per POST.

A waiter that registered too late (the run ended first), or that was not
told (the subscription down, Redis restarting, a run ended by
`manage.py recover_runs`), reads the database: `chat.live.streams` reads it
first and again after every quiet spell, so a missed signal costs seconds,
never the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import weakref
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger(__name__)

TERMINAL_EVENTS = frozenset({"run.completed", "run.failed", "run.cancelled"})
# What a waited post answers at: the run's end, or its pause for a person's decision
# (nothing moves until someone decides, and the one waiting may be that someone).
# The event commits with the run's `awaiting_approval` status.
WAIT_ENDS = TERMINAL_EVENTS | {"tool_call.approval_requested"}
# How long a wait lets the loop's first subscription come up before it reads the
# database anyway; and how long a failed subscription waits before it tries again.
SUBSCRIBE_WAIT_S = 1.0
LISTEN_RETRY_S = 1.0
# A subscription quiet this long is sent a PING, and opened again when nothing
# comes back within PONG_WAIT_S. A connection a NAT or a proxy dropped, or a hung
# Redis, gives no error; without the PING every later end would go unheard, and
# the waits would end only from their reads of the database (seconds each).
KEEPALIVE_S = 15.0
PONG_WAIT_S = 5.0

_lock = threading.Lock()
_waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}


@contextlib.contextmanager
def run_end_signal(run_id: Any) -> Iterator[asyncio.Event]:
    """An event set when the run's end commits in this process (within the `with`)."""
    key = str(run_id)
    entry = (asyncio.get_running_loop(), asyncio.Event())
    with _lock:
        _waiters.setdefault(key, []).append(entry)
    try:
        yield entry[1]
    finally:
        with _lock:
            waiting = _waiters.get(key, [])
            if entry in waiting:
                waiting.remove(entry)
            if not waiting:
                _waiters.pop(key, None)


def run_end_notify(run_id: Any) -> None:
    """Wake this process's waiters on the run's end (from any thread, after its commit)."""
    with _lock:
        waiting = list(_waiters.get(str(run_id), ()))
    for loop, event in waiting:
        with contextlib.suppress(RuntimeError):  # its loop has closed: nobody waits
            loop.call_soon_threadsafe(event.set)


class _RunEndListener:
    """One loop's subscription to the workers' run ends; calls `run_end_notify` for each."""

    def __init__(self, layer: Any) -> None:
        self.subscribed = asyncio.Event()
        self.first_try = True  # a wait lets the first subscription come up
        # In a context of its own: the request that starts it must not lend it
        # its context (its thread, which asgiref refuses once it has ended, and
        # its trace) for the life of the process.
        self.task = asyncio.get_running_loop().create_task(
            self._listen(layer), context=contextvars.Context()
        )

    async def _listen(self, layer: Any) -> None:
        channel = layer.run_ends_channel()
        while True:
            client = layer.run_ends_client()
            pubsub = client.pubsub()
            try:
                await pubsub.subscribe(channel)
                await self._read(pubsub)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning(
                    "the subscription to run ends failed (%s: %s); waits read the database "
                    "until it is back, tried again in %.0f s",
                    type(exc).__name__,
                    exc,
                    LISTEN_RETRY_S,
                )
            finally:
                self.subscribed.clear()
                self.first_try = False
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
                    await client.aclose()
            await asyncio.sleep(LISTEN_RETRY_S)

    async def _read(self, pubsub: Any) -> None:
        """Tell of each end heard; raises when the connection stops answering (see KEEPALIVE_S)."""
        loop = asyncio.get_running_loop()
        pinged = False
        due = loop.time() + KEEPALIVE_S  # the PING's, then the answer's
        while True:
            # None also when redis-py consumed a reply itself (a health check's pong,
            # a RESP3 push): only the deadline says the connection has been quiet.
            message = await pubsub.get_message(timeout=max(0.0, due - loop.time()))
            if message is None:
                if loop.time() < due:
                    continue
                if pinged:
                    raise ConnectionError(f"no answer to a PING in {PONG_WAIT_S:g} s")
                await pubsub.ping()
                pinged, due = True, loop.time() + PONG_WAIT_S
                continue
            pinged, due = False, loop.time() + KEEPALIVE_S
            if message["type"] == "subscribe":
                self.subscribed.set()
                self.first_try = False
            elif message["type"] == "message":
                run_end_notify(message["data"].decode())


_listeners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _RunEndListener] = (
    weakref.WeakKeyDictionary()
)


async def run_ends_listen(layer: Any) -> None:
    """Make sure this loop hears of the workers' run ends (see the module); never raises.

    The loop's first call waits for the subscription, up to SUBSCRIBE_WAIT_S,
    so that its waiter misses no end; later calls find it up (or, while
    Redis is unreachable, trying again) and return at once.
    """
    loop = asyncio.get_running_loop()
    listener = _listeners.get(loop)
    if listener is None or listener.task.done():
        listener = _listeners[loop] = _RunEndListener(layer)
    if listener.first_try and not listener.subscribed.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(listener.subscribed.wait(), SUBSCRIBE_WAIT_S)
