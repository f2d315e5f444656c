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

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from chat.exceptions import Conflict
from chat.models import ACTIVE_RUN_STATUSES, BudgetLimit, Conversation, Run
from chat.statements import model_columns


@contextmanager
def idle_conversation(conversation: Conversation) -> Iterator[tuple[Conversation, int | None]]:
    """A transaction holding the conversation's row lock, with no run active; its last position.

    The lock orders concurrent posts to one conversation; one statement takes
    it, moves the conversation's `updated_at` (its last activity), and finds
    an active run and the last position.
    """
    try:
        with transaction.atomic():
            locked, active_run_id, last_position = _lock_for_turn(conversation.pk)
            if active_run_id is not None:
                raise busy_conflict(Run.objects.get(pk=active_run_id))
            yield locked, last_position
    except IntegrityError:
        # The database's one-active-run constraint caught a race the lock did not.
        active = Run.objects.filter(
            conversation=conversation, status__in=ACTIVE_RUN_STATUSES
        ).first()
        if active is None:
            raise
        raise busy_conflict(active) from None


# The row lock, the last activity, the active run, the last position and whether
# any budget limit exists (with none, a post reads no budget), in one
# statement (the ACTIVE_RUN_STATUSES are its three parameters after the id).
_LOCK_FOR_TURN = """
UPDATE chat_conversation SET updated_at = %s WHERE id = %s
RETURNING {columns},
    (SELECT id FROM chat_run WHERE conversation_id = chat_conversation.id
     AND status IN (%s, %s, %s) LIMIT 1) AS active_run_id,
    (SELECT position FROM chat_message WHERE conversation_id = chat_conversation.id
     ORDER BY position DESC LIMIT 1) AS last_position,
    EXISTS (SELECT 1 FROM {limits}) AS budgeted
"""


@functools.cache
def _lock_for_turn_sql() -> str:
    table = connection.ops.quote_name(BudgetLimit._meta.db_table)
    return _LOCK_FOR_TURN.format(columns=model_columns(Conversation), limits=table)


def _lock_for_turn(conversation_id: Any) -> tuple[Conversation, Any, int | None]:
    """The conversation locked for a turn, its active run's id and its last position.

    Every post runs it: the ORM's select_for_update with two annotated
    subqueries, then a save, cost a third of a post's CPU to build
    (bench/post_cost.py). The instance is not for saving whole (its
    `last_event_seq` moves with every event); its `updated_at` is stored.
    """
    pk, updated_at = Conversation._meta.pk, Conversation._meta.get_field("updated_at")
    params = [
        updated_at.get_db_prep_value(timezone.now(), connection),
        pk.get_db_prep_value(conversation_id, connection),
        *(status.value for status in ACTIVE_RUN_STATUSES),
    ]
    rows = list(Conversation.objects.raw(_lock_for_turn_sql(), params))
    if not rows:
        raise Conversation.DoesNotExist(f"conversation {conversation_id} is gone")
    # The subqueries' columns, which raw() sets on the instance as they came; whether any
    # budget limit exists stays on it (`budgeted`: chat/services/runs.py reads it).
    locked = rows[0]
    vars(locked)["budgeted"] = bool(vars(locked).get("budgeted"))
    return locked, vars(locked).pop("active_run_id"), vars(locked).pop("last_position")


def busy_conflict(active: Run) -> Conflict:
    return Conflict(
        "A run of this conversation is still in progress; wait for it or cancel it.",
        details={"run_id": str(active.pk), "status": active.status},
    )
