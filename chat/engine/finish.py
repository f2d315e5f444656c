"""Ending a run: completed, failed or cancelled, in one function, whoever ends it.

`run_end` is the only way a run ends: the engine's answer (stored by the
model step, by a `direct` turn, or after the follow-up suggestions), its
failures, and a person's cancel (chat/services/runs.py) all go through it.
Each end is named by its trigger in the turn's table (chat/engine/states.py:
`completed`, `cancelled`, and a failure's `model_failed`, `limit_reached`,
`no_text_twice` or `error`), and the row is written by chat/engine/ledger/runs.py
`run_ended`, the status the end state stores with it. One transaction holds
the whole end:

    the run's row      status, finished_at, latency_ms (from the post to the end),
                       error, no lease, the last heartbeat; with any counter the
                       caller writes with it (the answer's model call); a run
                       that ends while it waits for a person (a cancel) adds
                       that wait to approval_wait_ms
    its open calls     answered (failed: "interrupted", cancelled: "cancelled"),
                       so the history stays valid; a completed run has none
    the caller's rows  the answer, written inside the `with` block
    the events         the caller's, then the end's: `run.completed`,
                       `run.failed` or `run.cancelled` (the ledger's
                       `run_ended_event`), always the run's last

The row is written first, as every step's write is: the engine's end is
fenced by its lease (LeaseLost when a cancel or a take-over came first), a
cancel by the row lock its caller took.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import transaction
from django.db.models import Min, OuterRef, Subquery, Sum
from django.utils import timezone

from chat.engine.lease import LeaseLost
from chat.engine.ledger import run_ended, run_ended_event
from chat.engine.states import ENDS, Trigger, TurnState
from chat.engine.tool_calls import unfinished_calls_answer
from chat.live.event_types import Event
from chat.live.events import events_publish
from chat.llm.endpoints import prices_configured
from chat.models import ExecutionStatus, ModelCall, Run, RunStatus, ToolExecution
from chat.telemetry.metrics import turn_observe
from chat.telemetry.tracing import turn_span_write
from tools.results import ToolResult, cancelled_result, interrupted_result


@dataclasses.dataclass(frozen=True)
class RunEnd:
    """How a run ends: the trigger that ends it (its end state), and what its end event says."""

    trigger: Trigger
    error: str = ""
    answer_id: uuid.UUID | None = None  # a completed run's final answer
    at: datetime.datetime | None = None  # when its latency stops (None: when it is written)

    @classmethod
    def completed(cls, answer_id: uuid.UUID, *, at: datetime.datetime | None = None) -> RunEnd:
        """Completed with `answer_id` as its answer; `at` when the turn's latency stops."""
        return cls(Trigger.COMPLETED, answer_id=answer_id, at=at)

    @classmethod
    def failed(cls, error: str, trigger: Trigger) -> RunEnd:
        """Failed, with a readable error; `trigger` says why (a model call's failure, say)."""
        return cls(trigger, error=error)

    @classmethod
    def cancelled(cls) -> RunEnd:
        """Cancelled by a person."""
        return cls(Trigger.CANCELLED)

    @property
    def state(self) -> TurnState:
        """The end the run is in: completed, failed or cancelled."""
        return ENDS[self.trigger]

    @property
    def open_call_result(self) -> Callable[..., ToolResult] | None:
        """The answer the run's open calls get; None for a completed run, which has none."""
        return {
            TurnState.FAILED: interrupted_result,
            TurnState.CANCELLED: cancelled_result,
        }.get(self.state)

    def fields(self, run: Run) -> dict[str, Any]:
        """The columns of the run's row at its end but its status: times, latency, no lease, the error."""
        now = timezone.now()
        ended = self.at or now
        fields: dict[str, Any] = {
            "finished_at": ended,
            "latency_ms": int((ended - run.created_at).total_seconds() * 1000),
            "lease": None,
            "heartbeat_at": now,
        }
        if self.error:
            fields["error"] = self.error
        return fields


@contextmanager
def run_end(
    run: Run,
    end: RunEnd,
    *,
    lease: uuid.UUID | None,
    counters: dict[str, Any] | None = None,
) -> Iterator[list[Event]]:
    """End the run as `end` says; the block writes what ends with it and lists its events.

    `lease` is the engine's token, checked by the write (LeaseLost when the
    run is no longer ours: nothing is written); None when the caller holds
    the run's row locked and checked it may end (a cancel). `counters` are
    columns written with the end (an answer's `model_calls`). The events the
    block appends to the yielded list go out before the end's, in one batch.
    Inside the caller's transaction (the model step's) it opens none.
    """
    with transaction.atomic(savepoint=False):
        fields = {**end.fields(run), **(counters or {})}
        if run.status == RunStatus.AWAITING_APPROVAL:
            fields["approval_wait_ms"] = _waited_until(run, fields["finished_at"])
        run_ended(run, end.trigger, fields, token=lease)
        result_for = end.open_call_result
        answered = unfinished_calls_answer(run, result_for) if result_for else []
        events: list[Event] = []
        yield events
        if prices_configured():
            # The run's cost: its model calls' summed, the final answer's among them (one UPDATE).
            costs = (
                ModelCall.objects.filter(run=OuterRef("pk"))
                .values("run")
                .annotate(total=Sum("cost_usd"))
                .values("total")
            )
            Run.objects.filter(pk=run.pk).update(cost_usd=Subquery(costs))
        ended = run_ended_event(
            run, end.trigger, error=end.error, answer_id=end.answer_id, answered=answered
        )
        events_publish(run=run, events=[*events, ended])
        transaction.on_commit(functools.partial(turn_span_write, run))
        transaction.on_commit(functools.partial(turn_observe, run))


def _waited_until(run: Run, ended: datetime.datetime) -> int | None:
    """The run's wait for people, with the pause it ends in (since its calls were stored)."""
    since = ToolExecution.objects.filter(
        run=run, status=ExecutionStatus.AWAITING_APPROVAL
    ).aggregate(since=Min("created_at"))["since"]
    if since is None:
        return run.approval_wait_ms
    return (run.approval_wait_ms or 0) + max(0, int((ended - since).total_seconds() * 1000))


def run_fail(
    run: Run,
    token: uuid.UUID,
    error: str,
    *,
    trigger: Trigger,
    counters: dict[str, Any] | None = None,
) -> None:
    """Mark the run failed with a readable error, if it is still ours to end.

    `trigger` names why, as the table does (`model_failed`, `limit_reached`,
    `no_text_twice`, `error`); `counters` as for `run_end` (the model call that
    failed counts among its calls).
    """
    try:
        with run_end(run, RunEnd.failed(error, trigger), lease=token, counters=counters):
            pass
    except LeaseLost:
        pass  # cancelled or taken over meanwhile: whoever did it ends the run
