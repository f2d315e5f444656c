"""Telling an unreachable database from a failed statement, and waiting for it to come back."""

from __future__ import annotations

import sqlite3

import psycopg
import psycopg.errors
import psycopg_pool
import pytest
from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError

from chat import database
from chat.database import database_retry, database_unreachable


def django_error(kind: type[DatabaseError], cause: BaseException | None) -> DatabaseError:
    """An error as Django raises it: its own class, with the driver's error as the cause."""
    error = kind(str(cause))
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    "cause",
    [
        psycopg.OperationalError("connection failed: Connection refused"),
        psycopg.OperationalError("consuming input failed: server closed the connection"),
        psycopg_pool.PoolTimeout("couldn't get a connection after 10.00 sec"),
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg.errors.CannotConnectNow("the database system is starting up"),
    ],
)
def test_a_server_that_is_down_or_restarting_is_unreachable(cause):
    assert database_unreachable(django_error(OperationalError, cause))


def test_a_closed_connection_is_unreachable():
    assert database_unreachable(InterfaceError("connection already closed"))


@pytest.mark.parametrize(
    "error",
    [
        django_error(OperationalError, psycopg.errors.DeadlockDetected("deadlock detected")),
        django_error(OperationalError, psycopg.errors.QueryCanceled("statement timeout")),
        django_error(IntegrityError, psycopg.errors.UniqueViolation("duplicate key")),
        django_error(OperationalError, sqlite3.OperationalError("database is locked")),
        ValueError("not a database error"),
    ],
)
def test_a_statement_that_failed_is_not_an_outage(error):
    assert not database_unreachable(error)


def test_a_write_is_tried_again_while_the_database_is_unreachable(monkeypatch):
    monkeypatch.setattr(database, "RETRY_EVERY_S", 0.01)
    attempts = []

    def write():
        attempts.append(1)
        if len(attempts) < 3:
            raise django_error(OperationalError, psycopg.OperationalError("Connection refused"))
        return "stored"

    assert database_retry(write, within_s=5) == "stored"
    assert len(attempts) == 3


def test_a_write_gives_up_after_its_time_and_never_retries_a_failed_statement(monkeypatch):
    monkeypatch.setattr(database, "RETRY_EVERY_S", 0.01)
    refused = django_error(OperationalError, psycopg.OperationalError("Connection refused"))
    deadlock = django_error(OperationalError, psycopg.errors.DeadlockDetected("deadlock"))
    for error, within_s in [(refused, 0.05), (deadlock, 5)]:
        attempts = []

        def write(error=error, attempts=attempts):
            attempts.append(1)
            raise error

        with pytest.raises(OperationalError):
            database_retry(write, within_s=within_s)
        assert (len(attempts) > 1) == (error is refused), attempts
