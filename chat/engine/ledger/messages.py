"""A turn's messages: the one writer of the assistant and tool messages a run stores.

No other module creates or updates a Message of a turn (tests/chat/engine/
test_one_message_writer.py holds it). Each write is one statement, in the
caller's transaction:

    assistant_message_create  an answer of the run, with its `message.completed`
                              event (chat/engine/answer_store.py, turn_complete.py,
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

Every event that tells of a message is made here, for the caller to publish
in its transaction:

    assistant_message_create  `message.completed`, with the stored answer
    direct_answer_create      a `direct` turn's answer, told whole:
                              `message.created`, its text, `message.completed`
    answer_opened             `message.created` of an answer a model step is
                              about to write (chat/engine/model_step.py)
    answer_streamed           `message.delta`: that answer's text as it streams
    answer_restarted          `message.delta` with `reset`: its stream starts over
    message_suggestions_write `message.suggestions`, with the follow-ups stored
    user_message_created      `message.created` of a user's message (chat/services/)
    messages_superseded       `messages.superseded`: what an edit or a regenerate
                              took out of the conversation (chat/services/runs.py)

The streamed text is live output, not a write: it is made here all the same,
beside the answer it shows before it is stored, so that what a run says of
its messages, streamed or stored, is made in one module (chat/engine/deltas.py
only coalesces it).
"""

from __future__ import annotations

import uuid
from typing import Any

from chat.engine.call_records import tool_message_position
from chat.history import message_to_api
from chat.live.event_types import (
    Event,
    MessageCompleted,
    MessageCreated,
    MessageDelta,
    MessagesSuperseded,
    MessageSuggestions,
)
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


def direct_answer_create(
    *, run: Run, message_id: uuid.UUID, position: int, content: str, **fields: Any
) -> tuple[Message, list[Event]]:
    """A `direct` turn's answer (the tools' own messages), and its events: the whole of it at once.

    No model streamed it: it is announced, given its text and completed in one batch.
    """
    message, completed = assistant_message_create(
        run=run,
        message_id=message_id,
        position=position,
        content=content,
        finish_reason="direct",
        **fields,
    )
    opened = MessageCreated(message_id=str(message_id), role="assistant", purpose="direct")
    return message, [opened, answer_streamed(str(message_id), content), completed]


def answer_opened(*, message_id: uuid.UUID, purpose: str, step: int, model: str) -> MessageCreated:
    """The `message.created` of an answer a model step is about to write (its ModelCall's id).

    Published before the call, it also lets a takeover record a call that died
    (chat/engine/model_calls.py `interrupted_call_record`).
    """
    return MessageCreated(
        message_id=str(message_id), role="assistant", purpose=purpose, step=step, model=model
    )


def answer_streamed(message_id: str, text: str) -> MessageDelta:
    """Text of an answer as its model streams it, ahead of the message stored."""
    return MessageDelta(message_id=message_id, text=text)


def answer_restarted(message_id: str, reason: str) -> MessageDelta:
    """An answer's stream starts over (its call was retried): what was shown of it goes."""
    return MessageDelta(message_id=message_id, reset=True, reason=reason, text="")


def user_message_created(message: Message) -> MessageCreated:
    """The `message.created` of a user's message: other tabs and clients show it at once."""
    return MessageCreated(message_id=str(message.pk), role="user", message=message_to_api(message))


def messages_superseded(
    message_ids: list[str], *, after_message_id: str | None = None
) -> MessagesSuperseded:
    """The `messages.superseded` of what an edit or a regenerate took out of the conversation.

    `after_message_id` is a regenerated answer's question.
    """
    return MessagesSuperseded(message_ids=message_ids, after_message_id=after_message_id)


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


def message_suggestions_write(final: Message, suggestions: list[str]) -> MessageSuggestions:
    """A final answer's merged follow-ups: stored, and on `final`; their event."""
    Message.objects.filter(pk=final.pk).update(suggestions=suggestions)
    final.suggestions = suggestions
    return MessageSuggestions(message_id=str(final.pk), suggestions=suggestions)
