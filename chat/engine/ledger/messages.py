"""A turn's messages: the one writer of the assistant and tool messages a run stores.

No other module creates or updates a Message of a turn (tests/chat/engine/
test_one_message_writer.py holds it). Each write is one statement, in the
caller's transaction:

    assistant_message_create  an answer of the run, with its `message.completed`
                              event (chat/engine/answer_store.py, turn_end.py,
                              forced_replay.py)
    tool_message_build        the (unsaved) tool message that answers a call, in
                              its place: a /v1 client's result is built so by
                              chat/services/client_turns.py and stored by `call_answer_store`
    tool_message_create       that message stored, for a result the engine has
    tool_message_store        a built tool message stored (chat/engine/ledger/calls.py)
    tool_message_correct      a late result replaces the answer its run's end wrote
    message_calls_rewrite     an approver's arguments replace the call's in its
                              assistant message (chat/engine/approvals.py)
    message_suggestions_write the merged follow-ups of a final answer
                              (chat/engine/suggestions.py)

Not a turn's, and written where they are made: the user's own message a post
stores and the messages an edit or a regenerate supersedes (chat/services/
runs.py), a /v1 client's own history (chat/services/client_turns.py `_imported`) and
a replay's copy of a conversation (chat/services/replays.py).
"""

from __future__ import annotations

import uuid
from typing import Any

from chat.engine.call_records import tool_message_position
from chat.history import message_to_api
from chat.live.event_types import MessageCompleted
from chat.models import Message, Role, Run, ToolExecution
from chat.statements import row_insert
from tools.models import Resource
from tools.results import ToolResult


def assistant_message_create(
    *, run: Run, message_id: uuid.UUID, position: int, **fields: Any
) -> tuple[Message, MessageCompleted]:
    """An answer of the run at `position`, and its `message.completed` event to publish.

    The caller holds the run's lease and row lock, in the transaction that commits it.
    """
    message = Message(
        id=message_id,
        conversation_id=run.conversation_id,
        run=run,
        position=position,
        role=Role.ASSISTANT,
        **fields,
    )
    row_insert(message)
    return message, MessageCompleted(message=message_to_api(message))


def tool_message_create(
    *,
    run: Run,
    execution: ToolExecution,
    content: str,
    resource_id: Any = None,
    resource: Resource | None = None,
) -> Message:
    """The `tool` message that answers a call (`execution.message` loaded).

    With the `resource` row at hand, the message's event shows its card without a query.
    """
    link: dict[str, Any] = {"resource": resource} if resource else {"resource_id": resource_id}
    message = tool_message_build(
        conversation_id=run.conversation_id, run_id=run.pk, execution=execution, content=content
    )
    for field, value in link.items():
        setattr(message, field, value)
    row_insert(message)
    return message


def tool_message_build(
    *, conversation_id: Any, run_id: Any, execution: ToolExecution, content: str
) -> Message:
    """The (unsaved) `tool` message that answers a call, in its place (`execution.message` loaded)."""
    return Message(
        conversation_id=conversation_id,
        run_id=run_id,
        position=tool_message_position(execution),
        role=Role.TOOL,
        tool_call_id=execution.tool_call_id,
        name=execution.name,
        content=content,
    )


def tool_message_store(message: Message) -> None:
    """Store a tool message built with `tool_message_build` (a /v1 client's result)."""
    row_insert(message)


def tool_message_correct(execution: ToolExecution, result: ToolResult) -> None:
    """The tool message a run's end answered a call with takes the tool's late result."""
    Message.objects.filter(
        run_id=execution.run_id, role=Role.TOOL, tool_call_id=execution.tool_call_id
    ).update(content=result.content, resource_id=result.resource_id)


def message_calls_rewrite(message: Message, tool_calls: list[dict[str, Any]]) -> None:
    """An assistant message's calls as an approver changed them: stored, and on `message`."""
    message.tool_calls = tool_calls
    Message.objects.filter(pk=message.pk).update(tool_calls=message.tool_calls)


def message_suggestions_write(final: Message, suggestions: list[str]) -> None:
    """A final answer's merged follow-ups: stored, and on `final`."""
    Message.objects.filter(pk=final.pk).update(suggestions=suggestions)
    final.suggestions = suggestions
