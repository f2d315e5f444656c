"""A conversation locked for a new turn: its row lock, with no run active, in one statement.

Every way a turn starts (a post, a regeneration, a /v1 client's request)
takes it first (chat/services/runs.py): the lock orders concurrent posts to
one conversation, and the database's one-active-run constraint catches a
race the lock did not.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from chat.budgets import BUDGET_LIMIT_FIELDS, limits_read
from chat.exceptions import Conflict
from chat.models import ACTIVE_RUN_STATUSES, BudgetLimit, Conversation, Run
from chat.statements import covering_column, covering_condition, model_columns


@contextmanager
def idle_conversation(
    conversation: Conversation, *, new: bool = False
) -> Iterator[tuple[Conversation, int | None]]:
    """A transaction holding the conversation's row lock, with no run active; its last position.

    The lock orders concurrent posts to one conversation; one statement takes
    it, moves the conversation's `updated_at` (its last activity), and finds
    an active run and the last position.

    `new`: the conversation was made in the caller's transaction, which no other
    can see, so no post can race this one: the block takes no savepoint (two
    statements a /v1 request that starts a conversation), and an IntegrityError
    is not a race.
    """
    try:
        with transaction.atomic(savepoint=not new):
            locked, active_run_id, last_position = _lock_for_turn(conversation.pk)
            if active_run_id is not None:
                raise busy_conflict(Run.objects.get(pk=active_run_id))
            yield locked, last_position
    except IntegrityError:
        if new:
            raise
        # The database's one-active-run constraint caught a race the lock did not.
        active = Run.objects.filter(
            conversation=conversation, status__in=ACTIVE_RUN_STATUSES
        ).first()
        if active is None:
            raise
        raise busy_conflict(active) from None


# The row lock, the last activity, the active run, the last position and the budget
# limits covering the conversation's owner (chat/budgets.py), in one statement (the
# ACTIVE_RUN_STATUSES are its three parameters after the id). On PostgreSQL, when a
# day's or month's limit covers the owner, it also locks the owner's row, so that
# their concurrent posts reserve one after another: the statement that reads what
# they used must come after the lock (each statement reads what was committed when
# it began), and it is the only query a budget adds to a post. On SQLite the
# conversation's UPDATE holds the database's one write lock until the commit, which
# orders every post already.
_LOCK_FOR_TURN = """
{owner_lock}UPDATE chat_conversation SET updated_at = %s WHERE id = %s
RETURNING {columns},
    (SELECT id FROM chat_run WHERE conversation_id = chat_conversation.id
     AND status IN (%s, %s, %s) LIMIT 1) AS active_run_id,
    (SELECT position FROM chat_message WHERE conversation_id = chat_conversation.id
     ORDER BY position DESC LIMIT 1) AS last_position,
    {limits} AS budget_limits{owner_locked}
"""

# The owner's row, locked when a limit of a calendar period covers them (its one
# parameter: the conversation's id). NO KEY: it orders their posts (it conflicts with
# itself) without holding up a commit whose rows point at the user (a foreign key's
# check takes KEY SHARE, which FOR UPDATE would block).
_OWNER_LOCK = """WITH owner_lock AS (
    SELECT person.{owner_pk} FROM {owner_table} AS person
    WHERE person.{owner_pk} = (SELECT owner_id FROM chat_conversation WHERE id = %s)
    AND EXISTS (SELECT 1 FROM {limits_table} AS calendar WHERE calendar.period <> 'run'
                AND {covers})
    FOR NO KEY UPDATE OF person
)
"""


@functools.cache
def _lock_for_turn_sql() -> str:
    quote = connection.ops.quote_name
    limits = covering_column(BudgetLimit, BUDGET_LIMIT_FIELDS, "chat_conversation.owner_id")
    if connection.vendor != "postgresql":
        return _LOCK_FOR_TURN.format(
            owner_lock="", columns=model_columns(Conversation), limits=limits, owner_locked=""
        )
    owner = get_user_model()._meta
    owner_lock = _OWNER_LOCK.format(
        owner_pk=quote(owner.pk.column),
        owner_table=quote(owner.db_table),
        limits_table=quote(BudgetLimit._meta.db_table),
        covers=covering_condition(BudgetLimit, "calendar", f"person.{quote(owner.pk.column)}"),
    )
    return _LOCK_FOR_TURN.format(
        owner_lock=owner_lock,
        columns=model_columns(Conversation),
        limits=limits,
        owner_locked=",\n    EXISTS (SELECT 1 FROM owner_lock) AS owner_locked",
    )


def _lock_for_turn(conversation_id: Any) -> tuple[Conversation, Any, int | None]:
    """The conversation locked for a turn, its active run's id and its last position.

    Every post runs it: the ORM's select_for_update with two annotated
    subqueries, then a save, cost a third of a post's CPU to build
    (bench/post_cost.py). The instance is not for saving whole (its
    `last_event_seq` moves with every event); its `updated_at` is stored.
    The budget limits covering the owner stay on it, as chat/budgets.py
    `budget_reserve` takes them (`budget_limits`, `owner_locked`).
    """
    pk, updated_at = Conversation._meta.pk, Conversation._meta.get_field("updated_at")
    conversation = pk.get_db_prep_value(conversation_id, connection)
    params = [
        *([conversation] if connection.vendor == "postgresql" else []),
        updated_at.get_db_prep_value(timezone.now(), connection),
        conversation,
        *(status.value for status in ACTIVE_RUN_STATUSES),
    ]
    rows = list(Conversation.objects.raw(_lock_for_turn_sql(), params))
    if not rows:
        raise Conversation.DoesNotExist(f"conversation {conversation_id} is gone")
    # The subqueries' columns, which raw() sets on the instance as they came.
    locked = rows[0]
    found = vars(locked)
    found["budget_limits"] = limits_read(found.get("budget_limits"))
    found["owner_locked"] = bool(found.get("owner_locked", connection.vendor != "postgresql"))
    return locked, found.pop("active_run_id"), found.pop("last_position")


def busy_conflict(active: Run) -> Conflict:
    return Conflict(
        "A run of this conversation is still in progress; wait for it or cancel it.",
        details={"run_id": str(active.pk), "status": active.status},
    )
