"""A run's end, told at once to whoever in this process waits for it.

`POST …/messages/?wait=true` needs a run's end, not its events. In the
embedded default (no Redis) every run ends in the web process itself, so the
wait needs neither the channel layer (a hop through the event sender's
thread, then one onto the request's loop) nor a read of the database to
learn what the process already knows: `events_publish` calls
`run_end_notify` when a terminal event commits, and that sets the waiters'
events on their own loops.

A waiter that registered too late (the run ended first) or whose run ended in
another process (`manage.py recover_runs`, a Celery worker) is not told:
`chat.live.streams.run_end_wait` reads the database first and again after
every quiet spell, so a missed signal costs seconds, never the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

TERMINAL_EVENTS = frozenset({"run.completed", "run.failed", "run.cancelled"})

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
