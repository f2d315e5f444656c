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
after their request, as before.

On a kept thread a SQLite connection is kept too (`connection_created` marks
it persistent), unless the request left it unusable: Django's
`close_old_connections` still closes one whose statement failed or whose
autocommit was left off, and `connections_tidy` one left inside a raw
transaction. A pooled PostgreSQL connection goes back to its pool at the end
of every request, as before.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext
from django.core.signals import request_finished
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created

from chat.database import connections_tidy

logger = logging.getLogger(__name__)

# Idle executors kept for the next requests: about the requests a process serves
# at once in steady use; a burst above it costs a thread start per request, as
# Django's own handler does for every request.
KEEP = 32

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


class KeptRequestThreads:
    """ASGI middleware: each HTTP request's sync code runs on a kept thread (see the module)."""

    def __init__(self, app: Any, *, keep: int = KEEP) -> None:
        self.app = app
        self.keep = keep
        # Used from the event loop's thread only.
        self._idle: list[ThreadPoolExecutor] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        executor = self._idle.pop() if self._idle else self._new()
        finished = False
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.app(scope, receive, send)
            finished = True
        finally:
            self._give_back(executor, finished)

    def _new(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="toolchat-request", initializer=_mark_kept
        )

    def _give_back(self, executor: ThreadPoolExecutor, finished: bool) -> None:
        # Django's handler waits for every sync call of its request (the last one
        # is the response's close), so a finished request left its thread idle.
        # One that raised or was cancelled may have left a call running: its
        # executor is not lent again.
        if finished and len(self._idle) < self.keep:
            self._idle.append(executor)
            return
        executor.submit(connections.close_all)  # after whatever is still running
        executor.shutdown(wait=False)
