"""A tool call's records: its audit row, and where the tool message that answers it goes.

What the engine builds about a call, in one place, whoever runs it: the run's
own worker, a tool task, an approval, or the end of a run
(chat/engine/tool_calls.py runs calls; chat/engine/ledger/calls.py writes
their outcomes and make their events, chat/engine/ledger/messages.py their
tool messages). The audit row built here is the call as the model asked it.

The answer to a call goes right after the assistant message that asked for
it, in the order of its calls (`tool_message_position`), whenever it arrives:
the history stays valid with no lock on the conversation.
"""

from __future__ import annotations

from typing import Any

from chat.models import Message, Run, ToolExecution
from tools.audit import arguments_for_audit


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


def tool_message_position(execution: ToolExecution) -> int:
    """Where the answer to a call goes: right after its assistant message, in call order."""
    ids = [call.get("id") for call in execution.message.tool_calls or []]
    return execution.message.position + 1 + ids.index(execution.tool_call_id)
