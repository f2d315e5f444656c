"""A /v1 client's turns: what a request adds to its conversation, and the run that answers it.

A client (chat/openai_api/) sends its whole conversation each time: the
messages the conversation has not stored yet (a new thread's past), the
results of its own tools' calls, and perhaps a new user message. These are
stored with the run, under the conversation's lock, as chat/services/runs.py
`run_start` stores a person's message.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from django.db import transaction
from django.utils import timezone

from chat.engine.dispatch import dispatch_run
from chat.engine.ledger import call_answer_store, tool_message_build, user_message_created
from chat.exceptions import InvalidInput
from chat.images import ImageInput
from chat.live.event_types import Event
from chat.live.events import events_publish
from chat.models import Conversation, ExecutionStatus, Message, Role, Run, ToolExecution
from chat.prompts import system_prompt_for
from chat.services.images import images_store
from chat.services.runs import (
    content_check,
    run_budget_reserve,
    run_regenerate,
    storable_check,
)
from chat.services.turn_lock import idle_conversation
from chat.telemetry.propagation import turn_trace_parent
from tools.results import client_result


@dataclasses.dataclass(frozen=True)
class ClientTurn:
    """What a /v1/chat/completions request adds to its conversation (chat/openai_api/)."""

    # Earlier messages the conversation has not stored (a new thread's past), in OpenAI
    # shape, checked by the caller: user, assistant (with tool_calls) and tool messages.
    history: list[dict[str, Any]]
    # The results of the calls of the client's own tools: (tool_call_id, content).
    results: list[tuple[str, str]]
    content: str | None  # the new user message, if the request ends with one
    tools: list[dict[str, Any]] | None  # the client's tools, in OpenAI shape
    options: dict[str, Any]  # the request's options the run honours and keeps
    images: list[ImageInput] = dataclasses.field(default_factory=list)  # the new message's


def client_run_regenerate(*, conversation: Conversation, turn: ClientTurn) -> Run:
    """A new answer to the client's last question, with the request's tools and options."""
    return run_regenerate(
        conversation=conversation, client_tools=turn.tools, client_options=turn.options
    )


def client_run_start(*, conversation: Conversation, turn: ClientTurn, new: bool = False) -> Run:
    """Store what a /v1 request adds (history, client tool results, a user message) and a run.

    In one transaction with the conversation's lock, as `run_start`; the
    results answer the calls the conversation's last run returned to the
    client (`client` executions), which become `succeeded` with what the
    model is sent. The run continues the turn from there. `new`: the
    conversation was made in the caller's transaction (`idle_conversation`).
    """
    if turn.content is not None:
        content_check(turn.content, images=bool(turn.images))
    with idle_conversation(conversation, new=new) as (locked, last_position):
        reservation = run_budget_reserve(locked)
        position = 0 if last_position is None else last_position + 1
        run_id = uuid.uuid4()
        owner_id = locked.owner_id
        # A conversation with no message yet has no call waiting for its client (messages
        # are never deleted, and a call is an answer's): only results need looking up.
        answered = (
            _client_calls_answered(locked, turn.results, run_id=run_id)
            if turn.results or last_position is not None
            else []
        )
        rows = [message for _, message in answered]
        if answered:
            position = max(position, max(m.position for m in rows) + 1)
        for item in turn.history:
            rows.append(_imported(locked, item, position=position))
            position += 1
        user = None
        if turn.content is not None:
            user = Message(
                conversation=locked,
                run_id=run_id,
                position=position,
                role=Role.USER,
                content=turn.content,
                images=images_store(owner_id=owner_id, images=turn.images),
            )
            rows.append(user)
        if not rows:
            raise InvalidInput("The request adds no message to the conversation.", field="messages")
        trigger = (user or rows[0]) if (answered or user) else rows[-1]
        run = Run.objects.create(
            id=run_id,
            conversation=locked,
            mode=locked.mode,
            system_prompt=system_prompt_for(locked),
            trigger_message_id=trigger.pk,
            trace_parent=turn_trace_parent(),
            client_tools=turn.tools or None,
            client_options=turn.options,
            budget=reservation.budget,
        )
        Message.objects.bulk_create(rows[len(answered) :])
        now = timezone.now()
        events: list[Event] = []
        for execution, message in answered:
            # The client's round trip, as far as the audit can tell.
            duration = int((now - execution.created_at).total_seconds() * 1000)
            result = client_result(
                execution.name,
                message.content or "",
                duration_ms=duration,
                tool_call_id=execution.tool_call_id,
            )
            # Locked as waiting for the client (`_client_calls_answered`): it is stored.
            stored = call_answer_store(run, execution, result, message=message)
            assert stored is not None
            events.append(stored[1])
        if user is not None:
            events.append(user_message_created(user))
        events.extend(reservation.warnings)
        if events:
            events_publish(run=run, events=events)
        transaction.on_commit(lambda: dispatch_run(run.pk))
    return run


def _client_calls_answered(
    conversation: Conversation, results: list[tuple[str, str]], *, run_id: uuid.UUID
) -> list[tuple[ToolExecution, Message]]:
    """The client's calls its results answer, each with its (unsaved) tool message.

    Every call the conversation returned to its client must be answered, once,
    before anything else is added (a follow-up that answers none is refused too);
    a result for another call is InvalidInput.
    """
    waiting = {
        execution.tool_call_id: execution
        for execution in ToolExecution.objects.select_for_update(of=("self",), no_key=True)
        .select_related("message")
        .filter(run__conversation=conversation, status=ExecutionStatus.CLIENT)
    }
    answered = []
    for call_id, content in results:
        execution = waiting.pop(call_id, None)
        if execution is None:
            raise InvalidInput(
                f"The tool message for {call_id!r} answers no call that waits for a result.",
                field="messages",
            )
        content_check_tool(content)
        message = tool_message_build(
            conversation_id=conversation.pk, run_id=run_id, execution=execution, content=content
        )
        answered.append((execution, message))
    if waiting:
        raise InvalidInput(
            "Every tool call needs its result: none was sent for "
            + ", ".join(sorted(waiting))
            + ".",
            field="messages",
            details={"tool_call_ids": sorted(waiting)},
        )
    return answered


def client_history_add(
    *, conversation: Conversation, history: list[dict[str, Any]]
) -> list[Message]:
    """Store a /v1 client's items in its conversation, after the last message, with no run.

    In one transaction with the conversation's lock (no run may be active: a
    Conflict); the history is checked by the caller, as `ClientTurn.history`.
    A call the conversation handed to its client still waits for its result:
    nothing else may follow it, so that is InvalidInput naming the calls.
    """
    with idle_conversation(conversation) as (locked, last_position):
        waiting = sorted(
            ToolExecution.objects.filter(
                run__conversation=locked, status=ExecutionStatus.CLIENT
            ).values_list("tool_call_id", flat=True)
        )
        if waiting:
            raise InvalidInput(
                "The conversation waits for the result of " + ", ".join(waiting) + "; answer "
                "it with a function_call_output in the next response first.",
                field="items",
                details={"call_ids": waiting},
            )
        position = 0 if last_position is None else last_position + 1
        rows = [
            _imported(locked, item, position=position + index) for index, item in enumerate(history)
        ]
        Message.objects.bulk_create(rows)
    return rows


def _imported(conversation: Conversation, item: dict[str, Any], *, position: int) -> Message:
    """A message of a client's own past, stored as it was (no run made it), its images too."""
    role = item["role"]
    content = item.get("content")
    if content is not None:
        content_check_tool(content)
    images = item.get("images") or []
    return Message(
        conversation=conversation,
        position=position,
        role=role,
        content=content if content is not None or role != Role.USER else "",
        tool_calls=item.get("tool_calls") or None,
        tool_call_id=item.get("tool_call_id"),
        name=item.get("name"),
        images=images_store(owner_id=conversation.owner_id, images=images) if images else None,
    )


def content_check_tool(content: str) -> None:
    """Refuse a tool result or an imported message no column may store (NUL, surrogates, size)."""
    storable_check(content, what="A message", field="messages")
