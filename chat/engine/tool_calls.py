"""Tool calls: their audit rows, running one call, storing its result, and the step's latch.

The calls of one step run concurrently, each as its own task. Each result is
stored as it completes (audit row, tool message, event), and the last one to
finish releases the latch: it queues the run again. While its tools work the
run holds no lease ("parked"), so no worker waits on them.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from chat.engine.dispatch import dispatch_run, dispatch_tool
from chat.engine.lease import next_position, run_lock, worker_name
from chat.history import message_to_api
from chat.live.events import event_publish
from chat.models import (
    FINISHED_EXECUTION_STATUSES,
    ExecutionStatus,
    Message,
    Role,
    Run,
    RunEvent,
    RunStatus,
    ToolExecution,
)
from tools.audit import arguments_for_audit
from tools.context import ToolContext
from tools.executor import execute_tool
from tools.registry import registry as tool_registry
from tools.results import ToolResult, interrupted_result

logger = logging.getLogger(__name__)


def tool_deadline(execution: ToolExecution) -> float:
    """Seconds after its start when a running call is presumed dead with its worker."""
    spec = tool_registry.get(execution.name)
    return (spec.timeout if spec else 60.0) + settings.TOOLCHAT_TOOL_GRACE_S


def execution_build(
    *, run: Run, message: Message, call: dict[str, Any], step: int
) -> ToolExecution:
    """The (unsaved) audit row of one call of an assistant message, arguments masked."""
    name = call["function"]["name"]
    arguments, arguments_raw = arguments_for_audit(name, call["function"]["arguments"])
    return ToolExecution(
        run=run,
        message=message,
        step=step,
        tool_call_id=call["id"],
        name=name[:64],
        arguments=arguments,
        arguments_raw=arguments_raw,
    )


def execution_event(execution: ToolExecution, **fields: Any) -> dict[str, Any]:
    """The data of a tool_call.* event: which call, and what there is to say about it."""
    return {
        "execution_id": str(execution.pk),
        "tool_call_id": execution.tool_call_id,
        "name": execution.name,
        **fields,
    }


def tool_message_create(
    *, run: Run, execution: ToolExecution, content: str, resource_id: Any = None
) -> Message:
    """The `tool` message that answers a call, at the conversation's next position."""
    return Message.objects.create(
        conversation_id=run.conversation_id,
        run=run,
        position=next_position(run.conversation_id),
        role=Role.TOOL,
        tool_call_id=execution.tool_call_id,
        name=execution.name,
        content=content,
        resource_id=resource_id,
    )


def run_park(run: Run, token: Any, unfinished: list[ToolExecution]) -> bool:
    """Release the run while its tools work, and (re)dispatch the calls nobody is running.

    False when, under the lock, no call is unfinished any more: the last one
    finished meanwhile (its wake-up could not claim the run we hold), so the
    caller goes on instead of waiting for a wake-up that already happened.
    """
    now = timezone.now()
    redo = []
    for execution in unfinished:
        if execution.status == ExecutionStatus.PENDING or (
            execution.status == ExecutionStatus.RUNNING
            and execution.started_at is not None
            and (now - execution.started_at).total_seconds() > tool_deadline(execution)
        ):
            redo.append(execution.pk)
    with transaction.atomic():
        run_lock(run, token)
        still = (
            ToolExecution.objects.filter(pk__in=[e.pk for e in unfinished])
            .exclude(status__in=FINISHED_EXECUTION_STATUSES)
            .exists()
        )
        if not still:
            return False
        Run.objects.filter(pk=run.pk).update(lease=None, heartbeat_at=now)
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
            _latch_release(run, execution.message_id)
            return
        if run.status not in (RunStatus.QUEUED, RunStatus.RUNNING):
            return
        spec = tool_registry.get(execution.name)
        interrupted = False
        if execution.status == ExecutionStatus.RUNNING and execution.started_at is not None:
            # Another delivery of this call started it. Until its deadline it may
            # still be running: look again then. After it, its worker is gone.
            age = (timezone.now() - execution.started_at).total_seconds()
            if age < tool_deadline(execution):
                if not settings.TOOLCHAT_TASKS_IN_PROCESS:
                    transaction.on_commit(
                        functools.partial(
                            dispatch_tool,
                            execution.pk,
                            delay_s=tool_deadline(execution) - age + 0.5,
                        )
                    )
                return
            interrupted = spec is None or not spec.idempotent
        if not interrupted:
            execution.status = ExecutionStatus.RUNNING
            execution.started_at = timezone.now()
            execution.attempts += 1
            execution.worker = worker_name()
            execution.save(update_fields=["status", "started_at", "attempts", "worker"])
            event_publish(
                run=run,
                type="tool_call.started",
                data=execution_event(
                    execution, arguments=execution.arguments, attempt=execution.attempts
                ),
            )
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
    raw_arguments = next(
        (
            call["function"]["arguments"]
            for call in execution.message.tool_calls or []
            if call.get("id") == execution.tool_call_id
        ),
        "{}",
    )
    context = ToolContext(
        user=run.conversation.owner,
        conversation_id=run.conversation_id,
        run_id=run.pk,
        tool_call_id=execution.tool_call_id,
        execution_id=execution.pk,
        sink=_event_sink(run),
        tool_name=execution.name,
    )
    result = execute_tool(name=execution.name, arguments=raw_arguments, context=context)
    tool_result_store(execution_id=execution.pk, result=result)


def _event_sink(run: Run) -> Callable[[str, dict[str, Any]], None]:
    def sink(event_type: str, data: dict[str, Any]) -> None:
        event_publish(run=run, type=event_type, data=data)

    return sink


def tool_result_store(*, execution_id: Any, result: ToolResult) -> None:
    """Store a tool call's result (audit row + tool message); the last one moves the run on."""
    with transaction.atomic():
        execution = ToolExecution.objects.select_related("run").get(pk=execution_id)
        run = Run.objects.select_for_update(no_key=True).get(pk=execution.run_id)
        execution = ToolExecution.objects.select_for_update(no_key=True).get(pk=execution_id)
        fields = result.execution_fields()
        if execution.status in FINISHED_EXECUTION_STATUSES:
            # Cancelled while it ran: keep what it did for the audit, change nothing else.
            ToolExecution.objects.filter(pk=execution.pk).update(
                result=result.result,
                result_chars=result.result_chars,
                truncated=result.truncated,
                duration_ms=result.duration_ms,
                error=f"{execution.error}; the tool finished after the run ended".strip("; "),
            )
            return
        if fields["arguments"] is None:
            fields["arguments"] = execution.arguments
        fields["arguments_raw"] = fields["arguments_raw"] or execution.arguments_raw
        ToolExecution.objects.filter(pk=execution.pk).update(finished_at=timezone.now(), **fields)
        message = tool_message_create(
            run=run, execution=execution, content=result.content, resource_id=result.resource_id
        )
        event_publish(
            run=run,
            type="tool_call.completed",
            data=execution_event(
                execution,
                status=result.status,
                duration_ms=result.duration_ms,
                truncated=result.truncated,
                message=message_to_api(message),
            ),
        )
        _latch_release(run, execution.message_id)


def unfinished_calls_answer(run: Run, result_for: Callable[..., ToolResult]) -> list[ToolExecution]:
    """Answer every unfinished call of an ending run (the run row is locked by the caller).

    The history stays valid for the model, and a tool that finishes later only
    adds to its audit row (see tool_result_store).
    """
    unfinished = list(
        ToolExecution.objects.select_for_update(no_key=True)
        .filter(run=run)
        .exclude(status__in=FINISHED_EXECUTION_STATUSES)
        .order_by("created_at")
    )
    now = timezone.now()
    for execution in unfinished:
        result = result_for(execution.name, tool_call_id=execution.tool_call_id)
        ToolExecution.objects.filter(pk=execution.pk).update(
            status=result.status, finished_at=now, content=result.content, error=result.error
        )
        tool_message_create(run=run, execution=execution, content=result.content)
    return unfinished


def _latch_release(run: Run, assistant_message_id: Any) -> None:
    """When no call of the step is unfinished, end the step and queue the run's next move."""
    remaining = (
        ToolExecution.objects.filter(message_id=assistant_message_id)
        .exclude(status__in=FINISHED_EXECUTION_STATUSES)
        .count()
    )
    if remaining or run.status not in (RunStatus.QUEUED, RunStatus.RUNNING):
        return
    if not RunEvent.objects.filter(
        run=run, type="tools.ended", data__message_id=str(assistant_message_id)
    ).exists():
        event_publish(run=run, type="tools.ended", data={"message_id": str(assistant_message_id)})
    transaction.on_commit(lambda: dispatch_run(run.pk))
