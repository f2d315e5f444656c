"""A tool call's records: its audit row, where the tool message that answers it goes, its events.

What the engine builds about a call, in one place, whoever runs it: the run's
own worker, a tool task, an approval, or the end of a run
(chat/engine/tool_calls.py runs calls; chat/engine/ledger/calls.py writes
their outcomes, chat/engine/ledger/messages.py their tool messages). The audit row built here is the call as the model asked it.

The answer to a call goes right after the assistant message that asked for
it, in the order of its calls (`tool_message_position`), whenever it arrives:
the history stays valid with no lock on the conversation.
"""

from __future__ import annotations

from typing import Any

from chat.history import message_to_api
from chat.live.event_types import CallFields, ToolCallCompleted, ToolCallStarted
from chat.models import Message, Run, ToolExecution
from tools.audit import arguments_for_audit
from tools.results import ToolResult


def execution_build(
    *, run: Run, message: Message, call: dict[str, Any], step: int
) -> ToolExecution:
    """The (unsaved) audit row of one call of an assistant message, arguments masked."""
    name = call["function"]["name"]
    arguments, arguments_raw = arguments_for_audit(name, call["function"]["arguments"])
    return ToolExecution(
        run=run,
        replay=run.sources.replay,
        message=message,
        step=step,
        tool_call_id=call["id"],
        name=name[:64],
        arguments=arguments,
        arguments_raw=arguments_raw,
    )


def call_fields(execution: ToolExecution) -> CallFields:
    """The fields a tool_call.* event starts with: which call it is about."""
    return {
        "execution_id": str(execution.pk),
        "tool_call_id": execution.tool_call_id,
        "name": execution.name,
    }


def tool_message_position(execution: ToolExecution) -> int:
    """Where the answer to a call goes: right after its assistant message, in call order."""
    ids = [call.get("id") for call in execution.message.tool_calls or []]
    return execution.message.position + 1 + ids.index(execution.tool_call_id)


def execution_started_event(execution: ToolExecution) -> ToolCallStarted:
    """The `tool_call.started` event of a started row (its arguments are masked already)."""
    return ToolCallStarted(
        **call_fields(execution), arguments=execution.arguments, attempt=execution.attempts
    )


def completed_event(
    execution: ToolExecution, result: ToolResult, message: Message
) -> ToolCallCompleted:
    """The `tool_call.completed` event of a stored result, with the tool message it made."""
    return ToolCallCompleted(
        **call_fields(execution),
        status=result.status,
        duration_ms=result.duration_ms,
        truncated=result.truncated,
        message=message_to_api(message),
    )
