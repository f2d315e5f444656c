"""Prepared statements (DATABASE_PREPARED_STATEMENTS) across a schema change made while the app runs.

A pooled connection prepares the statements it keeps running. A migration
that adds a column (run by `manage.py migrate` while web processes and
workers go on, as in a rolling deploy) must not break them: PostgreSQL
refuses to run a prepared statement whose result columns changed ("cached
plan must not change result type"), and psycopg keeps a connection's
prepared statements until it rolls back, so a statement that returned every
column of a table (`SELECT *`, `RETURNING *`) would fail on that connection
until the pool retired it, an hour later.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from chat.models import Role, Run, RunStatus
from chat.selectors import run_final_message, run_shown
from chat.services.turn_lock import idle_conversation
from tests.factories import ConversationFactory, MessageFactory, RunFactory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# Every table whose rows the app reads whole, by a statement of its own.
TABLES = ("chat_conversation", "chat_run", "chat_message", "chat_modelcall", "chat_toolexecution")


def migration_connection() -> psycopg.Connection[Any]:
    """A connection of its own to the test database, as `manage.py migrate` would open."""
    params = connection.get_connection_params()
    where = {key: params[key] for key in ("dbname", "user", "host", "port") if params.get(key)}
    return psycopg.connect(**where, autocommit=True)


@pytest.fixture
def answered(user) -> Run:
    """A completed run and its answer."""
    conversation = ConversationFactory(owner=user)
    run = RunFactory(conversation=conversation, status=RunStatus.COMPLETED)
    MessageFactory(conversation=conversation, run=run, role=Role.ASSISTANT, content="42")
    return run


@pytest.fixture
def migrated_meanwhile() -> Iterator[None]:
    """A column added to each table by another connection (a migration), dropped afterwards."""
    with migration_connection() as other:
        for table in TABLES:
            other.execute(f"ALTER TABLE {table} ADD COLUMN added_by_a_migration integer")
        try:
            yield
        finally:
            for table in TABLES:
                other.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS added_by_a_migration")


def test_a_column_added_while_the_app_runs_breaks_none_of_its_prepared_reads(
    user, answered, request
):
    run, conversation = answered, answered.conversation

    def reads() -> None:
        # What a waited post and its answer read, and what the next post locks.
        shown = run_shown(run_id=run.pk, user=user)
        assert shown.run.pk == run.pk
        answer = run_final_message(run=shown.run)
        assert answer is not None
        assert answer.content == "42"
        with idle_conversation(conversation):
            pass

    for _ in range(6):  # past the threshold (5): each statement is prepared
        reads()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE NOT from_sql")
        assert cursor.fetchone()[0] >= 4
    request.getfixturevalue("migrated_meanwhile")
    reads()


@pytest.fixture
def widened_meanwhile() -> Iterator[None]:
    """A column the reads return made wider by another connection (a migration), then put back."""
    with migration_connection() as other:
        other.execute("ALTER TABLE chat_message ALTER COLUMN model TYPE varchar(200)")
        try:
            yield
        finally:
            other.execute("ALTER TABLE chat_message ALTER COLUMN model TYPE varchar(128)")


@pytest.fixture
def answer_prepared(answered) -> Run:
    """A completed run whose answer's read this connection has run often enough to prepare."""
    for _ in range(6):
        assert run_final_message(run=answered).content == "42"
    return answered


def test_a_column_widened_while_the_app_runs_is_read_again_at_once_outside_a_transaction(
    answer_prepared, widened_meanwhile
):
    # Its result's columns changed: PostgreSQL refuses the prepared statement,
    # which is prepared anew and run again.
    assert run_final_message(run=answer_prepared).content == "42"
    assert run_final_message(run=answer_prepared).content == "42"


def test_inside_a_transaction_it_fails_once_and_the_next_transaction_reads_again(
    answer_prepared, widened_meanwhile
):
    from django.db import NotSupportedError, transaction

    with pytest.raises(NotSupportedError), transaction.atomic():
        run_final_message(run=answer_prepared)  # the transaction is aborted: not run again
    with transaction.atomic():
        assert run_final_message(run=answer_prepared).content == "42"
