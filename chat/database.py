"""Telling a database that cannot be reached from a statement that failed.

While PostgreSQL is down or restarting, every query fails, and none of it is
the request's or the run's fault: the API and the WebSocket handshake answer
503 and ask the client to come back (chat/api/errors.py,
chat/live/ws_auth.py), and the engine leaves its run to the recovery sweep
rather than failing it (chat/engine/run.py). A statement that failed (a
constraint, a deadlock, bad data) is another matter, and keeps its usual
handling.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from django.db import (
    DEFAULT_DB_ALIAS,
    InterfaceError,
    NotSupportedError,
    OperationalError,
    connection,
    connections,
)
from django.db.backends.base.base import BaseDatabaseWrapper

logger = logging.getLogger(__name__)
T = TypeVar("T")

# How often a write waits for the database is tried again (with the pool, each try
# also waits for a connection up to the pool's timeout).
RETRY_EVERY_S = 1.0

# How long what exists only in a worker's memory (a tool's result, a model's answer)
# waits for a database that cannot be reached (an outage, a restart) before it is
# given up: stored late, nothing need be done again.
HOLD_WHILE_UNREACHABLE_S = 300.0

# What a client or a browser is told to wait while the database is unreachable (a
# restart takes seconds): the API's 503 (chat/api/errors.py) and the pages' (chat/views.py).
UNAVAILABLE_RETRY_S = 5


def unavailable_body() -> dict[str, Any]:
    """What a client is answered while the database is unreachable, in the API's error shape."""
    return {
        "code": "unavailable",
        "message": "The database is unavailable; try again in a few seconds.",
        "details": {"retry_after": UNAVAILABLE_RETRY_S},
    }


# SQLSTATE classes of a connection lost or refused by the server: 08 (connection
# exception) and 57P (the server shutting down, crashed, or not yet started).
_UNREACHABLE_SQLSTATES = ("08", "57P")


def database_unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the database could not be reached, rather than that a statement failed."""
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    cause = exc.__cause__
    if isinstance(exc, InterfaceError):
        # Django's own "connection already closed" (no cause), or psycopg's.
        return cause is None or isinstance(cause, psycopg.Error)
    if not isinstance(cause, psycopg.Error):
        return False  # SQLite's errors are statements', never a server's absence
    # No SQLSTATE: the client's own error (refused, lost, or no pooled connection in time).
    return cause.sqlstate is None or cause.sqlstate.startswith(_UNREACHABLE_SQLSTATES)


def connections_tidy() -> None:
    """Before and after a job on one of this process's own threads (its task and socket pools).

    A SQLite connection stays open on its thread for the next job: opening one
    (the file, and the WAL pragmas) took 2 to 4 ms, more than a step's own
    statements, at every task and socket message; Django's `close_old_connections`
    closed it each time, since connections are not persistent (a request's
    thread lives for one request, these live for the process). One that a job
    left in a transaction, or on which a statement failed, is closed (a new one
    is opened by the next query); a pooled PostgreSQL connection goes back to
    its pool, as before.
    """
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        if (
            conn.vendor == "sqlite"
            and conn.get_autocommit()
            and not conn.errors_occurred
            and not conn.connection.in_transaction  # a raw BEGIN too
        ):
            continue
        conn.close()


def database_up_since() -> datetime | None:
    """When the database server last started (PostgreSQL); None for SQLite, a file."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_postmaster_start_time()")
        row = cursor.fetchone()
    return row[0] if row else None


def database_retry(write: Callable[[], T], *, within_s: float) -> T:
    """Do `write`, and again while the database cannot be reached, for up to `within_s` seconds.

    For what exists only in this process's memory until it is stored (what a
    tool returned): thrown away, it could only be made again by running the
    tool again. A statement that fails is not tried again.
    """
    deadline = time.monotonic() + within_s
    while True:
        try:
            return write()
        except (OperationalError, InterfaceError) as exc:
            if not database_unreachable(exc) or time.monotonic() + RETRY_EVERY_S > deadline:
                raise
            logger.warning("the database is unreachable (%s); trying again", exc)
        connections[DEFAULT_DB_ALIAS].close()  # a broken connection is not used again
        time.sleep(RETRY_EVERY_S)


# PostgreSQL's refusal to run a prepared statement whose result's columns changed
# since it was prepared (SQLSTATE 0A000, feature_not_supported).
_RESULT_CHANGED = "cached plan must not change result type"


def prepared_statements_renewed(
    execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]
) -> Any:
    """Run a statement; if its prepared plan outlived a schema change, prepare it anew.

    A pooled connection keeps the statements it prepared (DATABASE_PREPARED_STATEMENTS)
    until it sees a ROLLBACK or a DEALLOCATE ALL (psycopg then forgets them too).
    A migration that changes a column they return (a wider CharField), run while
    the app goes on, makes PostgreSQL refuse them. Outside a transaction the
    statement is run again once, after a DEALLOCATE ALL; inside one the
    transaction is already aborted, and its rollback makes the next try work.
    """
    try:
        return execute(sql, params, many, context)
    except NotSupportedError as exc:
        conn: BaseDatabaseWrapper = context["connection"]
        if _RESULT_CHANGED not in str(exc) or conn.in_atomic_block or not conn.get_autocommit():
            raise
        logger.info("a prepared statement outlived a schema change; preparing it anew")
        with conn.cursor() as cursor:
            cursor.execute("DEALLOCATE ALL")
        return execute(sql, params, many, context)


def prepared_statements_guard(connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """`connection_created`'s receiver: a connection that prepares statements renews them."""
    wrappers = connection.execute_wrappers
    if (
        connection.vendor == "postgresql"
        and getattr(connection.features, "uses_server_side_binding", False)
        and prepared_statements_renewed not in wrappers
    ):
        wrappers.append(prepared_statements_renewed)
