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
  hears it on its one subscription per event loop (chat/live/subscription.py),
  which calls it. A wait joined and left a channel-layer group of its own
  before, five round trips to Redis and a receive loop per POST.

Each end told is kept for a while (`run_end_heard`): a wait that began
before its run was dispatched, where every end reaches this process
(the runs are this process's own, or its subscription was up since before),
finds its end there if it came first, and needs no read of the database to
know it did not. A waiter that cannot tell (its subscription came up after
the run was dispatched, or dropped meanwhile) reads the database first. And a
waiter that was not told (the subscription down, Redis restarting, a run
ended by `manage.py recover_runs`) reads it after every quiet spell
(chat/live/run_wait.py), so a missed signal costs seconds, never the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

TERMINAL_EVENTS = frozenset({"run.completed", "run.failed", "run.cancelled"})
# What a waited post answers at: the run's end, or its pause for a person's decision
# (nothing moves until someone decides, and the one waiting may be that someone).
# The event commits with the run's `awaiting_approval` status.
WAIT_ENDS = TERMINAL_EVENTS | {"tool_call.approval_requested"}
# How many ends told are kept, and when each was told (`time.monotonic()`, which is
# also an event loop's clock): minutes of a busy process's ends.
HEARD_MAX = 4096
_lock = threading.Lock()
_waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
_heard: OrderedDict[str, float] = OrderedDict()
_forgotten_at = float("-inf")  # when the newest end no longer kept was told


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


def run_end_heard(run_id: Any, since: float) -> bool | None:
    """Whether the run's end was told here at `since` (`time.monotonic()`) or later.

    None when that cannot be told: an end told since then is no longer kept.
    False only means that no end was told; the caller knows whether every end
    since `since` would have been.
    """
    with _lock:
        told = _heard.get(str(run_id))
        if told is not None and told >= since:
            return True
        return None if _forgotten_at >= since else False


def run_end_notify(run_id: Any) -> None:
    """Wake this process's waiters on the run's end (from any thread, after its commit)."""
    global _forgotten_at
    key = str(run_id)
    with _lock:
        _heard[key] = time.monotonic()
        _heard.move_to_end(key)
        while len(_heard) > HEARD_MAX:
            _forgotten_at = max(_forgotten_at, _heard.popitem(last=False)[1])
        waiting = list(_waiters.get(key, ()))
    for loop, event in waiting:
        with contextlib.suppress(RuntimeError):  # its loop has closed: nobody waits
            loop.call_soon_threadsafe(event.set)
