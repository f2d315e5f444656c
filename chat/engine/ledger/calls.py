"""A tool call's outcome: the one writer of what became of a call after the model asked for it.

No other module writes a ToolExecution's outcome (tests/chat/engine/
test_one_outcome_writer.py holds it): its status, its result and what the
model was sent (`result`, `content`, `result_chars`, `truncated`), `error`,
`started_at`, `finished_at`, `duration_ms`, `attempts`, `worker`, the
person's decision (`approved_by`, `decided_at`, `decision_reason`,
`approved_arguments`, `standing_approval`) and the recorded call a replay
served (`replayed_from`).

The row's creation is not an outcome, and stays where the answer that asked
for the call is stored (chat/engine/call_records.py `execution_build`,
chat/engine/answer_store.py): the call as the model asked it (name,
arguments, step, whether its run is a replay) and the policy's verdict on it.
The answer's rows are marked here before that one INSERT, each as what its
verdict made it:

    call_for_client      a /v1 client's own tool: `client`, returned to the client
    call_held            the policy asks a person: `awaiting_approval`
    call_denied          the policy refused it: the reason (the refusal is its result)
    call_standing_approved  its owner said yes to the tool in this conversation
    call_start           run at once by the run's worker: `running`, this worker

Then each later write is one statement on the row:

    call_start_write     a tool task starts a queued call (chat/engine/tool_calls.py)
    call_decided         a person's decision, or the sweep's expiry (chat/engine/approvals.py)
    call_replay_link     a replay's call takes the recorded call it is served
                         (chat/engine/replay_tools.py), ahead of its result
    call_answer_store    a result, whoever has it: the run's worker, a tool task,
                         a refusal, a rejection, the end of a run (interrupted,
                         cancelled), a replay's recorded result, a /v1 client's
                         own (chat/services/client_turns.py); the row once, with the
                         tool message that answers it and its event
    late_result_store    a call answered by its run's end whose tool finished after all

Each write makes the event that tells of it, for the caller to publish with
its transaction: `call_start` and `call_start_write` their `tool_call.started`,
`call_held` its `tool_call.approval_requested`, `call_decided` its
`tool_call.approval_decided`, `call_answer_store` its `tool_call.completed`;
and `tools_ended` the step's `tools.ended` once its last call is answered.
What a running tool reports (`call_reported`: its progress, its own events)
is checked into its event here too: no module outside the ledger and the
live layer makes an event (tests/chat/engine/test_one_event_maker.py).

A running call's `heartbeat_at` is its liveness, renewed by its heartbeat
(chat/engine/call_liveness.py), not an outcome. The tool message is written
by chat/engine/ledger/messages.py; a late result corrects the one its run's
end wrote, in the same transaction as the row.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from chat.engine.lease import worker_name
from chat.engine.ledger.messages import (
    tool_message_correct,
    tool_message_create,
    tool_message_store,
)
from chat.history import message_to_api
from chat.live.event_types import (
    CallFields,
    Event,
    ToolCallApprovalDecided,
    ToolCallApprovalRequested,
    ToolCallCompleted,
    ToolCallStarted,
    ToolsEnded,
    event_from,
)
from chat.models import (
    FINISHED_EXECUTION_STATUSES,
    ExecutionStatus,
    Message,
    Run,
    StandingApproval,
    ToolExecution,
)
from tools.registry import registry as tool_registry
from tools.results import ToolResult

logger = logging.getLogger(__name__)


def call_for_client(execution: ToolExecution) -> None:
    """Mark an (unsaved) call of a /v1 client's own tool: returned to the client to run."""
    execution.status = ExecutionStatus.CLIENT


def call_held(execution: ToolExecution) -> ToolCallApprovalRequested:
    """Mark an (unsaved) call that waits for a person's decision; its event asks them.

    The `tool_call.approval_requested` event says what the call will do, its
    arguments masked.
    """
    execution.status = ExecutionStatus.AWAITING_APPROVAL
    arguments = execution.arguments if execution.arguments is not None else {}
    spec = tool_registry.get(execution.name)
    description = spec.describe_call(arguments) if spec else execution.name
    return ToolCallApprovalRequested(
        **_call_fields(execution), arguments=arguments, description=description
    )


def call_denied(execution: ToolExecution, reason: str) -> None:
    """Note on an (unsaved) call why the policy refused it; the refusal is stored as its result."""
    execution.decision_reason = reason


def call_standing_approved(execution: ToolExecution, approval: StandingApproval) -> None:
    """Mark an (unsaved) call that runs without asking: its owner said yes in this conversation."""
    execution.standing_approval = approval
    execution.approved_by_id = approval.created_by_id
    execution.decided_at = timezone.now()
    execution.decision_reason = f"approved for this conversation (standing approval {approval.pk})"


def call_start(execution: ToolExecution) -> ToolCallStarted:
    """Mark the (in-memory) row as started by this worker; an unsaved one is then inserted.

    Returns its `tool_call.started` event (its arguments are masked already).
    """
    execution.status = ExecutionStatus.RUNNING
    execution.started_at = execution.heartbeat_at = timezone.now()
    execution.attempts += 1
    execution.worker = worker_name()
    return ToolCallStarted(
        **_call_fields(execution), arguments=execution.arguments, attempt=execution.attempts
    )


def call_start_write(execution: ToolExecution) -> ToolCallStarted:
    """Start a stored call in this worker (the caller holds its row locked); its event."""
    started = call_start(execution)
    execution.save(update_fields=["status", "started_at", "heartbeat_at", "attempts", "worker"])
    return started


def call_decided(
    execution: ToolExecution,
    *,
    user: Any,
    at: Any,
    reason: str,
    approve: bool,
    approved_arguments: Any = None,
    standing_approval: StandingApproval | None = None,
) -> ToolCallApprovalDecided:
    """A person's decision on a waiting call (its row locked by the caller), in one UPDATE.

    Approved, the call is queued again (`pending`), with `approved_arguments`
    (masked) when the person changed the model's, and the standing approval it
    made if any; rejected, it keeps waiting until its rejection is stored as
    its result (`call_answer_store`, in the same transaction). Returns the
    `tool_call.approval_decided` event, with the arguments it runs with when
    the person changed them.
    """
    execution.approved_by = user
    execution.decided_at = at
    execution.decision_reason = reason
    if approved_arguments is not None:
        execution.approved_arguments = approved_arguments
    fields = ["approved_by", "decided_at", "decision_reason", "approved_arguments"]
    if standing_approval is not None:
        execution.standing_approval = standing_approval
        fields.append("standing_approval")
    if approve:
        execution.status = ExecutionStatus.PENDING
        fields.insert(0, "status")
    execution.save(update_fields=fields)
    return ToolCallApprovalDecided(
        **_call_fields(execution), approved=approve, reason=reason, arguments=approved_arguments
    )


def call_replay_link(execution: ToolExecution, recorded: ToolExecution) -> None:
    """Link a replay's call to the original's call it is served (IntegrityError: taken)."""
    ToolExecution.objects.filter(pk=execution.pk).update(replayed_from=recorded)


def call_answer_store(
    run: Run, execution: ToolExecution, result: ToolResult, *, message: Message | None = None
) -> tuple[Message, ToolCallCompleted] | None:
    """Store a call's result: its audit row, the tool message that answers it, and its event.

    The one way a result is stored, whoever has it: the run's own worker, a
    tool task, a rejection, or a /v1 client sending its own tool's result
    (with the tool `message` it built in its place: chat/services/client_turns.py).
    In the caller's transaction; returns the tool message and its
    `tool_call.completed` event to publish, or None when the call was
    answered already (its run ended meanwhile): then what the tool did is
    kept on its audit row only. Stored, `execution.status` is the result's.
    """
    if not _result_write(execution, result):
        _late_result_keep(execution, result)
        return None
    execution.status = result.status
    if message is None:
        message = tool_message_create(
            run=run,
            execution=execution,
            content=result.content,
            resource_id=result.resource_id,
            resource=result.resource,
        )
    else:
        tool_message_store(message)
    completed = ToolCallCompleted(
        **_call_fields(execution),
        status=result.status,
        duration_ms=result.duration_ms,
        truncated=result.truncated,
        message=message_to_api(message),
    )
    return message, completed


def tools_ended(assistant_message_id: Any) -> ToolsEnded:
    """The `tools.ended` event: every call of the assistant message has its answer stored.

    The caller found so, in the transaction of the last answer (`call_answer_store`).
    """
    return ToolsEnded(message_id=str(assistant_message_id))


def call_reported(event_type: str, data: dict[str, Any]) -> Event:
    """What a running call's tool reports (its progress, an event of its own), as its event.

    A tool sends a type and a dict (tools/context.py may not import chat): they
    are checked against their class here, ValueError for what none declares.
    """
    return event_from(event_type, data)


def _call_fields(execution: ToolExecution) -> CallFields:
    """The fields a tool_call.* event starts with: which call it is about."""
    return {
        "execution_id": str(execution.pk),
        "tool_call_id": execution.tool_call_id,
        "name": execution.name,
    }


def _result_write(execution: ToolExecution, result: ToolResult) -> bool:
    """Fill the audit row of a call that is still running; False if it ended meanwhile.

    A call of a /v1 client's own tool is done as far as its run is concerned
    (`client`) until the client's next request brings its result: that row
    takes it, once.
    """
    fields = result.execution_fields()
    stored = {"arguments": execution.arguments, "arguments_raw": execution.arguments_raw}
    _model_arguments_keep(fields, execution.approved_arguments, stored)
    rows = ToolExecution.objects.filter(pk=execution.pk)
    if execution.status == ExecutionStatus.CLIENT:
        rows = rows.filter(status=ExecutionStatus.CLIENT)
    else:
        rows = rows.exclude(status__in=FINISHED_EXECUTION_STATUSES)
    return bool(rows.update(finished_at=timezone.now(), **fields))


def _model_arguments_keep(fields: dict[str, Any], approved: Any, stored: Mapping[str, Any]) -> None:
    """The row keeps the arguments the model sent, as `stored` has them.

    A result says the arguments its tool ran with. Those are the model's own
    unless an approver changed them: then the row has them as
    `approved_arguments` already, and `arguments` stays what the model asked.
    """
    if approved is not None or fields["arguments"] is None:
        fields["arguments"] = stored["arguments"]
    if approved is not None or not fields["arguments_raw"]:
        fields["arguments_raw"] = stored["arguments_raw"]


# What a run's end answers a call that was still open with (chat/engine/finish.py).
_ENDED_WITH_THE_RUN = (ExecutionStatus.CANCELLED, ExecutionStatus.INTERRUPTED)


def _late_result_keep(execution: ToolExecution, result: ToolResult) -> None:
    """A call answered already (its run ended while it ran) that finished after all.

    The record says what it did: its row takes the tool's own outcome (noted
    as finished after its run ended), and the tool message that answered it
    with "cancelled" or "interrupted" takes the tool's result, so that the
    history a later turn reads is true. A tool that stopped because of that
    cancel did nothing more to keep: the row says `cancelled` once, as the
    cancel wrote it. Nothing is published: the run's end was its last event.
    """
    if result.status == ExecutionStatus.CANCELLED:
        return
    with transaction.atomic():
        # Only an answer the run's end wrote is replaced (not a result stored already).
        row = (
            ToolExecution.objects.select_for_update(of=("self",), no_key=True)
            .filter(pk=execution.pk, status__in=_ENDED_WITH_THE_RUN)
            .values("error", "run__status", "arguments", "arguments_raw", "approved_arguments")
            .first()
        )
        if row is None:
            return
        ended = str(row["run__status"])
        fields = result.execution_fields()
        _model_arguments_keep(fields, row["approved_arguments"], row)
        note = f"the tool finished after its run was {ended}"
        fields["error"] = "; ".join(part for part in (fields["error"], note) if part)
        ToolExecution.objects.filter(pk=execution.pk).update(**fields)
        tool_message_correct(execution, result)
    logger.warning(
        "tool call %s (%s) finished after its run was %s; its record says what it did",
        execution.tool_call_id,
        execution.name,
        ended,
    )


def late_result_store(*, execution_id: Any, result: ToolResult) -> None:
    """A call given up on at its run's cancel (its tool went on) that ended: keep what it did."""
    found = (
        ToolExecution.objects.filter(pk=execution_id)
        .only("id", "run_id", "name", "tool_call_id")
        .first()
    )
    if found is not None:
        _late_result_keep(found, result)
