"""Tool calls: running one call, storing its result, and the step's latch.

A step's single call is run by the run's own worker, right after the answer
that asked for it is stored (`tool_call_run`): its row is marked running in
that transaction, so a worker that dies mid-call leaves the same trace as a
tool task that dies. Several calls run concurrently, each as its own task;
each result is stored as it completes (audit row, tool message, event), and
the last one to finish releases the latch: it queues the run again. While
those tools work the run holds no lease ("parked"), so no worker waits on them.

A call's audit row is built in chat/engine/call_records.py; every write of
a call's outcome (started, its result, a late one) and the event that tells
of it is the ledger's (chat/engine/ledger/calls.py).
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from chat.database import HOLD_WHILE_UNREACHABLE_S, database_retry
from chat.engine.call_liveness import CallHeartbeat, call_dead_in
from chat.engine.dispatch import dispatch_run, dispatch_tool
from chat.engine.lease import Heartbeat, LeaseLost, connection_release, restart_grace_left
from chat.engine.ledger import (
    call_answer_store,
    call_reported,
    call_start_write,
    late_result_store,
    run_write,
    tools_ended,
)
from chat.engine.replay_tools import call_arguments, recorded_result
from chat.live.event_types import Event
from chat.live.events import event_publish, events_publish
from chat.models import (
    FINISHED_EXECUTION_STATUSES,
    ExecutionStatus,
    Message,
    Run,
    RunEvent,
    RunStatus,
    ToolExecution,
    ToolSource,
)
from chat.telemetry.metrics import tool_call_observe
from chat.telemetry.propagation import headers_inject
from chat.telemetry.tracing import tool_span
from tools.context import ToolContext
from tools.executor import execute_tool
from tools.registry import registry as tool_registry
from tools.results import ToolResult, interrupted_result

logger = logging.getLogger(__name__)

# A run whose calls may run: the ones that need no approval run while others wait.
_WORKING_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL)


def run_park(run: Run, token: Any, unfinished: list[ToolExecution]) -> bool:
    """Release the run while its tools work, and (re)dispatch the calls nobody is running.

    False when, under the lock, no call is unfinished any more: the last one
    finished meanwhile (its wake-up could not claim the run we hold), so the
    caller goes on instead of waiting for a wake-up that already happened.
    """
    now = timezone.now()
    started = any(e.status == ExecutionStatus.RUNNING and e.started_at for e in unfinished)
    grace_left = restart_grace_left(now) if started else 0.0  # a query: only when it matters
    redo = []
    for execution in unfinished:
        if execution.status == ExecutionStatus.PENDING or (
            execution.status == ExecutionStatus.RUNNING
            and execution.started_at is not None
            and call_dead_in(execution, now, grace_left=grace_left) <= 0
        ):
            redo.append(execution.pk)
    with transaction.atomic():
        run_write(run, token, lease=None, heartbeat_at=now)
        still = (
            ToolExecution.objects.filter(pk__in=[e.pk for e in unfinished])
            .exclude(status__in=FINISHED_EXECUTION_STATUSES)
            .exists()
        )
        if not still:
            transaction.set_rollback(True)  # keep the lease: the caller goes on
            run.lease = token
            return False
        for execution_id in redo:
            transaction.on_commit(functools.partial(dispatch_tool, execution_id))
    return True


def tool_call_execute(*, execution_id: Any) -> None:
    """Run one tool call (at most once, unless its tool is idempotent) and store its result."""
    with transaction.atomic():
        execution = (
            ToolExecution.objects.select_for_update(of=("self",), no_key=True)
            .select_related("run", "run__conversation", "run__conversation__owner", "message")
            .filter(pk=execution_id)
            .first()
        )
        if execution is None:
            return
        run = execution.run
        if execution.status in FINISHED_EXECUTION_STATUSES:
            # A redelivery after the result was stored: make sure the run moved on.
            events_publish(run=run, events=latch_release(run, execution.message_id))
            return
        if run.status not in _WORKING_STATUSES:
            return
        if execution.status == ExecutionStatus.AWAITING_APPROVAL:
            return  # a decision dispatches it again
        spec = tool_registry.get(execution.name)
        interrupted = False
        if execution.status == ExecutionStatus.RUNNING and execution.started_at is not None:
            # Another delivery of this call started it. While its heartbeat is
            # fresh it is still running: look again when it would be stale.
            now = timezone.now()
            dead_in = call_dead_in(execution, now, grace_left=restart_grace_left(now))
            if dead_in > 0:
                if not settings.TOOLCHAT_TASKS_IN_PROCESS:
                    transaction.on_commit(
                        functools.partial(dispatch_tool, execution.pk, delay_s=dead_in + 0.5)
                    )
                return
            # A call whose result is recorded ran nothing: serving it again is safe.
            interrupted = (spec is None or not spec.idempotent) and run.sources.tools_run
        if not interrupted:
            events_publish(run=run, events=[call_start_write(execution)])
    if interrupted:
        logger.warning(
            "tool call %s (%s) was in flight when its worker died; not repeating it",
            execution.tool_call_id,
            execution.name,
        )
        tool_result_store(
            execution_id=execution.pk,
            result=interrupted_result(execution.name, tool_call_id=execution.tool_call_id),
        )
        return
    result = _execute(run, execution)
    database_retry(
        functools.partial(tool_result_store, execution_id=execution.pk, result=result),
        within_s=HOLD_WHILE_UNREACHABLE_S,
    )


def _execute(run: Run, execution: ToolExecution) -> ToolResult:
    """The result of a started call (`execution.message` loaded), from the run's source of them.

    A run of its own runs the tool; a replay with recorded tools runs nothing:
    the call is served from the original run's record (chat/engine/replay_tools.py).
    """
    return _RESULT_FROM[run.sources.tools](run, execution, call_arguments(execution))


def _tool_run(run: Run, execution: ToolExecution, raw_arguments: str) -> ToolResult:
    """Run the call's tool with its context."""
    context = ToolContext(
        user=run.conversation.owner,
        conversation_id=run.conversation_id,
        run_id=run.pk,
        tool_call_id=execution.tool_call_id,
        execution_id=execution.pk,
        sink=_event_sink(run),
        tool_name=execution.name,
        # A tool that ends after its run's cancel gave up on it: the record says what it did.
        ended_after_cancel=functools.partial(_ended_after_cancel, execution.pk),
    )
    connection_release()  # a tool that needs the database takes a connection again
    spec = tool_registry.get(execution.name)
    # An MCP server's tool calls an outside system: an "extension" in the conventions' terms.
    tool_type = "extension" if spec is not None and spec.server else "function"
    with (
        tool_span(run, execution, tool_type=tool_type) as record,
        CallHeartbeat(execution.pk, context),
    ):
        headers_inject(context.trace_headers)  # the tool runs in a thread of its own
        result = execute_tool(name=execution.name, arguments=raw_arguments, context=context)
        record(result)
    tool_call_observe(run, execution.name, result)
    return result


_RESULT_FROM: dict[ToolSource, Callable[[Run, ToolExecution, str], ToolResult]] = {
    ToolSource.RUN: _tool_run,
    ToolSource.RECORDED: recorded_result,
}


def _ended_after_cancel(execution_id: Any, result: ToolResult) -> None:
    database_retry(
        functools.partial(late_result_store, execution_id=execution_id, result=result),
        within_s=HOLD_WHILE_UNREACHABLE_S,
    )


def tool_call_run(
    run: Run,
    token: uuid.UUID,
    execution: ToolExecution,
    *,
    announce: Sequence[Event] = (),
) -> Message:
    """Run a step's one call in the run's own worker, which keeps the lease, and store it.

    The call is the step's only one, so its result ends the step (`tools.ended`)
    in the same transaction, with the events of `announce` (the next step's
    `message.created`). Returns the tool message. Raises LeaseLost when the run
    was cancelled or taken over meanwhile: what the tool did is kept for the
    audit only.
    """
    with Heartbeat(run, token):
        result = _execute(run, execution)

    def store() -> tuple[Message, Event] | None:
        with transaction.atomic():
            answered = call_answer_store(run, execution, result)
            if answered is not None:
                ended = tools_ended(execution.message_id)
                events_publish(run=run, events=[answered[1], ended, *announce])
        return answered

    answered = database_retry(store, within_s=HOLD_WHILE_UNREACHABLE_S)
    if answered is None:
        raise LeaseLost(str(run.pk))
    return answered[0]


def _event_sink(run: Run) -> Callable[[str, dict[str, Any]], None]:
    def sink(event_type: str, data: dict[str, Any]) -> None:
        # What a tool sends is a type and a dict (tools/ may not import chat): checked here.
        event_publish(run=run, event=call_reported(event_type, data))

    return sink


def call_lock(executions: QuerySet[ToolExecution], execution_id: Any) -> tuple[Run, ToolExecution]:
    """Lock a call's run, then the call (the lock order), `message` loaded.

    `executions` says whose calls may be found (all, or a user's own);
    Run.DoesNotExist when the call is not among them.
    """
    run = Run.objects.select_for_update(no_key=True).get(
        pk=executions.filter(pk=execution_id).values("run_id")[:1]
    )
    execution = (
        ToolExecution.objects.select_for_update(of=("self",), no_key=True)
        .select_related("message")
        .get(pk=execution_id)
    )
    return run, execution


def tool_result_store(*, execution_id: Any, result: ToolResult) -> None:
    """Store a queued call's result (audit row + tool message); the last one moves the run on."""
    with transaction.atomic():
        # The run's row lock makes the latch exact: of the step's parallel calls,
        # exactly one sees that none is left unfinished.
        try:
            run, execution = call_lock(ToolExecution.objects.all(), execution_id)
        except (Run.DoesNotExist, ToolExecution.DoesNotExist):
            # Its conversation was deleted while the tool ran (a replay's goes with its
            # original's, chat/services/conversations.py): no record is left to keep it.
            logger.info("tool call %s ended, but its run is gone; nothing to store", execution_id)
            return
        answered = call_answer_store(run, execution, result)
        if answered is None:
            return
        events = [answered[1], *latch_release(run, execution.message_id)]
        events_publish(run=run, events=events)


def unfinished_calls_answer(run: Run, result_for: Callable[..., ToolResult]) -> list[ToolExecution]:
    """Answer every unfinished call of an ending run (the run row is locked by the caller).

    The history stays valid for the model, and a tool that finishes later only
    adds to its audit row (see tool_result_store).
    """
    unfinished = list(
        ToolExecution.objects.select_for_update(of=("self",), no_key=True)
        .select_related("message")
        .filter(run=run)
        .exclude(status__in=FINISHED_EXECUTION_STATUSES)
        .order_by("created_at")
    )
    now = timezone.now()
    for execution in unfinished:
        started = execution.started_at if execution.status == ExecutionStatus.RUNNING else None
        result = result_for(
            execution.name, tool_call_id=execution.tool_call_id, started=started is not None
        )
        # A call that had started ran until now, as far as the audit knows. The run's end
        # event names the calls it answered: theirs (`tool_call.completed`) is not sent.
        result.duration_ms = int((now - started).total_seconds() * 1000) if started else 0
        call_answer_store(run, execution, result)
    return unfinished


def latch_release(run: Run, assistant_message_id: Any) -> list[Event]:
    """When no call of the step is unfinished, end the step and queue the run's next move.

    Returns the step's `tools.ended` event for the caller to publish (none if
    the step is not over, or its end was published already).
    """
    remaining = (
        ToolExecution.objects.filter(message_id=assistant_message_id)
        .exclude(status__in=FINISHED_EXECUTION_STATUSES)
        .count()
    )
    if remaining or run.status not in (RunStatus.QUEUED, RunStatus.RUNNING):
        return []
    transaction.on_commit(lambda: dispatch_run(run.pk))
    if RunEvent.objects.filter(
        run=run, type="tools.ended", data__message_id=str(assistant_message_id)
    ).exists():
        return []
    return [tools_ended(assistant_message_id)]
