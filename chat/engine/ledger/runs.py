"""A run's row: its claim, the writes fenced by its lease, and the one writer of its status.

No other module writes `Run.status` (tests/chat/engine/test_one_status_writer.py
holds it). Each status write here is a move of the turn's table
(chat/engine/states.py): the status stored is `STORED_STATUS` of the state the
move leads to, as `transition` names it, read off the table once at import
(a move the table does not have fails there, `UnknownTransition`).

    run_claim            QUEUED -claimed-> CLAIMED, or PARKED -woken-> CLAIMED
                         (a take-over of a stale lease too): running, leased
    run_approval_wait    ASKING -approval_asked-> AWAITING_APPROVAL, with the
                         step's columns, under the lease (chat/engine/answer_store.py)
    run_decided          AWAITING_APPROVAL -decided-> PARKED: running, no lease,
                         when the last waiting call is decided (chat/engine/approvals.py)
    run_ended            any state before an end -completed, -model_failed,
                         -limit_reached, -no_text_twice, -cancelled, -error->
                         the end: chat/engine/finish.py `run_end`, whoever ends it

The run's own events are made here, beside the writes they tell of: its
`run.started` (`run_started`, told once of the run its claim started, with
its first step's or on a take-over) and its end's `run.completed`,
`run.failed` or `run.cancelled` (`run_ended_event`, read off the row
`run_ended` wrote). A soft budget limit reached is warned of here too
(`budget_warnings`): a run's, noted on its row once (`run_budget_warned`), and
a post's (chat/services/runs.py `run_budget_reserve`).

A claim is a compare-and-set on the run row; the holder renews `heartbeat_at`
while it works (chat/engine/lease.py), and anyone may take over a lease whose
heartbeat went stale. Every other write of a step (`run_write`) happens under
the run's row lock with the lease checked, so a worker that lost its lease (a
cancel, a take-over) changes nothing. Each move is the one statement it was
before the moves had names: the same UPDATE, the same fences.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import DateTimeField, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from chat.budgets import Reached
from chat.engine.claim_read import claimed_read, claimed_reread, prepared
from chat.engine.lease import LeaseLost, stale_cutoff
from chat.engine.states import ENDS, STORED_STATUS, Trigger, TurnState, transition
from chat.live.event_types import (
    BudgetWarning,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
)
from chat.models import Run, RunStatus, ToolExecution
from chat.statements import rows_update


def _stored(state: TurnState, trigger: Trigger) -> RunStatus:
    """The status a run in `state` is stored with once `trigger` happened to it."""
    return STORED_STATUS[transition(state, trigger)]


# A queued run's claim, and a parked run's (woken by its last call, or taken over when
# its lease went stale); the take-over's UPDATE may find a queued run too, and the table
# stores both moves alike (tests/chat/engine/test_states.py).
_CLAIMED = _stored(TurnState.QUEUED, Trigger.CLAIMED)
_WOKEN = _stored(TurnState.PARKED, Trigger.WOKEN)
_APPROVAL_ASKED = _stored(TurnState.ASKING, Trigger.APPROVAL_ASKED)
_DECIDED = _stored(TurnState.AWAITING_APPROVAL, Trigger.DECIDED)
# The status of a run a worker holds: what a write under its lease expects to find.
_LEASED = STORED_STATUS[TurnState.CLAIMED]


@dataclass(frozen=True)
class Claim:
    """A run taken by this worker: the row as claimed, the lease token, and whether it is new.

    `first` is a claim of a run nobody worked on before: nothing of it is
    stored yet beyond its user message, so there is nothing to look up or
    repair before the first model call.
    """

    run: Run
    token: uuid.UUID
    first: bool


# A queued run nobody started, claimed (the parameters: started_at, status, lease,
# heartbeat_at, then the run's id and the status it must have).
_CLAIM = """
WITH claimed AS (
    UPDATE chat_run SET started_at = %s, status = %s, lease = %s, heartbeat_at = %s
    WHERE id = %s AND status = %s AND started_at IS NULL
    RETURNING *
)
"""


def run_claim(*, run_id: Any) -> Claim | None:
    """Take the run's lease if it is free or stale; None when someone else holds it or it ended.

    The run comes with its conversation, the conversation's owner, and the
    conversation's last position (chat/engine/claim_read.py).
    """
    now = timezone.now()
    token = uuid.uuid4()
    # The common case first: a queued run nobody has started.
    if connection.vendor == "postgresql":
        params = [
            prepared("started_at", now),
            _CLAIMED.value,
            prepared("lease", token),
            prepared("heartbeat_at", now),
            prepared("id", run_id),
            RunStatus.QUEUED.value,
        ]
        run = claimed_read(_CLAIM, params)
        if run is not None:
            return Claim(run, token, first=True)
    else:
        started = Run.objects.filter(
            pk=run_id, status=RunStatus.QUEUED, started_at__isnull=True
        ).update(started_at=now, status=_CLAIMED, lease=token, heartbeat_at=now)
        if started:
            return Claim(claimed_reread(run_id), token, first=True)
    free = Q(lease__isnull=True) | Q(heartbeat_at__isnull=True)
    stale = stale_cutoff(now)
    claimed = (
        Run.objects.filter(pk=run_id, status__in=[RunStatus.QUEUED, RunStatus.RUNNING])
        .filter(free | Q(heartbeat_at__lt=stale) if stale else free)
        .update(
            started_at=Coalesce("started_at", Value(now, output_field=DateTimeField())),
            status=_WOKEN,
            lease=token,
            heartbeat_at=now,
        )
    )
    if not claimed:
        return None
    return Claim(claimed_reread(run_id), token, first=False)


def run_started(run: Run) -> RunStarted:
    """The `run.started` event of a run `run_claim` started (the caller tells it once)."""
    return RunStarted(mode=run.mode)


def run_write(run: Run, token: uuid.UUID, **fields: Any) -> None:
    """Update the run's row if the lease is still ours, else raise LeaseLost.

    Called first in a step's transaction: the UPDATE takes the run's row lock
    (held to commit) and checks the lease in one statement. The status is not
    one of `fields`: it moves only by the moves of this module.
    """
    if "status" in fields:
        raise TypeError("a run's status moves only by chat/engine/ledger/runs.py's moves")
    _leased_write(run, token, fields)


def _leased_write(run: Run, token: uuid.UUID, fields: dict[str, Any]) -> None:
    fields.setdefault("heartbeat_at", timezone.now())
    ours = {"id": run.pk, "lease": token, "status": _LEASED}
    written = rows_update(Run, ours, **fields)
    if not written:
        raise LeaseLost(str(run.pk))
    for name, value in fields.items():
        setattr(run, name, value)


def run_approval_wait(run: Run, token: uuid.UUID, **fields: Any) -> None:
    """ASKING -approval_asked-> AWAITING_APPROVAL: the step's columns, and the run waits.

    Under the lease, as `run_write`; the caller gives the lease up in `fields`
    (nobody holds a run that waits for a person: a decision moves it on).
    """
    _leased_write(run, token, {**fields, "status": _APPROVAL_ASKED})


def run_decided(run: Run, *, at: Any) -> None:
    """AWAITING_APPROVAL -decided-> PARKED: no call waits for a person; the run works again.

    The caller holds the run's row locked and has checked that it waited; the
    run's `approval_wait_ms` (set by the caller) is written with it.
    """
    Run.objects.filter(pk=run.pk).update(
        status=_DECIDED, heartbeat_at=at, approval_wait_ms=run.approval_wait_ms
    )
    run.status = _DECIDED


def run_ended(
    run: Run, trigger: Trigger, fields: dict[str, Any], *, token: uuid.UUID | None
) -> None:
    """The run's end that `trigger` leads to, with the end's other columns (`fields`).

    `token` is the engine's lease, checked by the write (LeaseLost when the run
    is no longer ours: nothing is written); None when the caller holds the
    run's row locked and checked it may end (a cancel).
    """
    ended = {"status": STORED_STATUS[ENDS[trigger]], **fields}
    if token is None:
        Run.objects.filter(pk=run.pk).update(**ended)
        for name, value in ended.items():
            setattr(run, name, value)
    else:
        _leased_write(run, token, ended)


def run_ended_event(
    run: Run,
    trigger: Trigger,
    *,
    error: str = "",
    answer_id: uuid.UUID | None = None,
    answered: list[ToolExecution] | None = None,
) -> RunCompleted | RunFailed | RunCancelled:
    """The end's event, from the run's row as `run_ended` wrote it and the open calls it answered.

    `error` is a failed run's, `answer_id` a completed run's final answer and
    `answered` the calls a cancel answered.
    """
    end = ENDS[trigger]
    if end == TurnState.FAILED:
        return RunFailed(error=error)
    if end == TurnState.CANCELLED:
        return RunCancelled(cancelled_tool_calls=[e.tool_call_id for e in answered or []])
    return RunCompleted(
        message_id=str(answer_id),
        latency_ms=run.latency_ms,
        model_calls=run.model_calls,
        steps=run.steps,
    )


def run_budget_warned(run: Run, fresh: Sequence[Reached]) -> tuple[BudgetWarning, ...]:
    """Note on the run the soft limits it reached (`budget["warned"]`, each once); their events.

    `fresh` are those not warned of yet (chat/engine/run_limits.py `run_limit_check`).
    """
    budget = run.budget or {}
    warned = set(budget.get("warned") or [])
    budget["warned"] = sorted(warned | {found.limit.id for found in fresh})
    Run.objects.filter(pk=run.pk).update(budget=budget)
    run.budget = budget
    return budget_warnings(fresh)


def budget_warnings(reached: Iterable[Reached]) -> tuple[BudgetWarning, ...]:
    """The `budget.warning` events of soft limits reached: a run's, or a post's."""
    return tuple(
        BudgetWarning(limit=found.data(), message=found.sentence() + "; this is a warning.")
        for found in reached
    )
