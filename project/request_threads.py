"""Threads for the requests' sync code, kept from one request to the next.

Django's ASGI handler runs a request's sync code (the middleware, DRF's
authentication and throttles, the ORM) on a thread of the request's own:
asgiref makes a single-thread executor for every request and ends it with the
request (its thread-sensitive mode). Starting that thread was a share of every
request's CPU, and on SQLite the connection opened on it went with it, so
every request opened one (the file and the WAL pragmas, 1.5 to 4 ms).

`KeptRequestThreads` wraps the HTTP application and lends each request one
of a set of kept single-thread executors for the whole request
(`ThreadSensitiveContext(executor=...)`, asgiref 3.13). Nothing changes for
the request: its sync code still runs on one thread, its own while it lasts,
one call after another; the thread simply outlives it. Up to `KEEP` idle
executors are kept; a burst of more requests at once makes more, which end
after their request, as Django's own do.

On a kept thread a SQLite connection is kept too (`connection_created` marks
it persistent; on the first `KEEP_CONNECTED` idle threads), unless the
request left it with autocommit off (Django's `close_old_connections` closes
it) or inside a raw transaction (`connections_tidy`). After a failed
statement Django asks the connection whether it is usable, and SQLite's
always is: it is kept. A pooled PostgreSQL connection goes back to its pool
at the end of every request, as before.

One instance serves one event loop (uvicorn's, one a process): its lists of
idle executors are not locked. Idle threads are not trimmed: after a burst,
up to `KEEP` stay for the life of the process (about 5 MiB for all of them).
A task that a request starts and that outlives it gets a `RuntimeError` from
asgiref at its first thread-sensitive call (the request's context has
exited): tasks that live for the process are started in a context of their
own (chat/live/run_ends.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from asgiref.sync import ThreadSensitiveContext
from django.core.signals import request_finished
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created

from chat.database import connections_tidy

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Idle executors kept for the next requests. An idle thread costs about 20 KiB;
# starting one, 0.2 ms of CPU and more under load (a tenth of the web process's
# samples under 400 turns at once, with 32 kept). On SQLite only the first
# KEEP_CONNECTED keep their connection too (each may cache up to 2 MB of pages):
# about the requests a small site serves at once.
KEEP = 256
KEEP_CONNECTED = 32

_kept = threading.local()


def _mark_kept() -> None:
    """The initializer of a kept executor's thread."""
    _kept.thread = True


def on_kept_thread() -> bool:
    """Whether the calling thread is one of the requests' kept threads."""
    return getattr(_kept, "thread", False)


def _keep_sqlite_connection(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    if connection.vendor == "sqlite" and on_kept_thread():
        connection.close_at = None  # persistent, as CONN_MAX_AGE=None makes it


def _tidy_after_request(sender: Any, **kwargs: Any) -> None:
    if on_kept_thread():
        connections_tidy()


connection_created.connect(_keep_sqlite_connection, dispatch_uid="toolchat-kept-sqlite")
# After Django's own close_old_connections (connected when django.db is imported).
request_finished.connect(_tidy_after_request, dispatch_uid="toolchat-kept-tidy")


class _RequestExecutor(ThreadPoolExecutor):
    """One kept thread, and whether a call submitted to it has not finished yet.

    `submit` is called from the event loop's thread, and a call finishes on the
    executor's own: each counter has one writer.
    """

    def __init__(self) -> None:
        super().__init__(
            max_workers=1, thread_name_prefix="toolchat-request", initializer=_mark_kept
        )
        self._submitted = 0
        self._finished = 0

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        self._submitted += 1
        return super().submit(self._counted, fn, *args, **kwargs)

    def _counted(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            self._finished += 1

    def busy(self) -> bool:
        return self._finished < self._submitted


class KeptRequestThreads:
    """ASGI middleware: each HTTP request's sync code runs on a kept thread (see the module)."""

    def __init__(self, app: Any, *, keep: int = KEEP, keep_connected: int = KEEP_CONNECTED) -> None:
        self.app = app
        self.keep = keep
        self.keep_connected = min(keep, keep_connected)
        # Used from the event loop's thread only. `_idle` keep their thread's
        # connections; `_spare` (beyond keep_connected) have closed theirs.
        self._idle: list[_RequestExecutor] = []
        self._spare: list[_RequestExecutor] = []
        self._sqlite = connections[DEFAULT_DB_ALIAS].vendor == "sqlite"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        executor = self._take()
        finished = False
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.app(scope, receive, send)
            finished = True
        finally:
            self._give_back(executor, finished)

    def kept(self) -> int:
        """Idle executors kept for the next requests."""
        return len(self._idle) + len(self._spare)

    def _take(self) -> _RequestExecutor:
        for idle in (self._idle, self._spare):
            if idle:
                return idle.pop()
        return _RequestExecutor()

    def _give_back(self, executor: _RequestExecutor, finished: bool) -> None:
        # Django's handler awaits its request's sync calls, and queues its last
        # ones (the request_finished signal, the response's close) behind any call
        # a disconnect abandoned, so its thread is usually idle by now. One still
        # busy (a call submitted and not awaited), or whose request raised, is not
        # lent again: the next request would wait behind it.
        reusable = finished and not executor.busy()
        if reusable and len(self._idle) < self.keep_connected:
            self._idle.append(executor)
            return
        if reusable and self.kept() < self.keep:
            if self._sqlite:
                executor.submit(connections.close_all)
            self._spare.append(executor)
            return
        executor.submit(connections.close_all)  # after whatever is still running
        executor.shutdown(wait=False)
