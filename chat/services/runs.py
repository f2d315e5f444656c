"""Runs: start one for a user message, cancel it. The engine (chat/engine/) executes them."""

from __future__ import annotations

import dataclasses
import unicodedata
import uuid
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from chat.budgets import Reservation, budget_reserve
from chat.engine.dispatch import dispatch_run
from chat.engine.finish import RunEnd, run_end
from chat.engine.ledger import call_answer_store, tool_message_build
from chat.exceptions import Conflict, InvalidInput, RunNotFound
from chat.history import message_to_api
from chat.images import ImageInput
from chat.live.event_types import Event, MessageCreated, MessagesSuperseded
from chat.live.events import event_publish, events_publish
from chat.models import (
    ACTIVE_RUN_STATUSES,
    Conversation,
    ExecutionStatus,
    Message,
    Role,
    Run,
    ToolExecution,
)
from chat.prompts import system_prompt_for
from chat.selectors import current_messages
from chat.services.images import images_store
from chat.services.turn_lock import idle_conversation
from chat.statements import row_insert
from chat.telemetry.propagation import turn_trace_parent
from tools.results import client_result


def run_start(
    *,
    conversation: Conversation,
    content: str,
    replaces: Any = None,
    images: Sequence[ImageInput] = (),
) -> Run:
    """Store the user's message and a queued run in one transaction; queue the run on commit.

    With `replaces` (the id of the conversation's last user message) the
    message is an edit: that message and its answer are superseded, kept in
    the record but no longer part of what the model or a reader sees. With
    `images` (checked, chat/images.py) the message carries them, each stored
    as its author's `image` resource in the same transaction.
    """
    content_check(content, images=bool(images))
    with idle_conversation(conversation) as (locked, last_position):
        superseded: list[str] = []
        if replaces is not None:
            replaced = _last_user_message(locked)
            if replaced is None or str(replaced.pk) != str(replaces):
                raise Conflict(
                    "Only the conversation's last user message can be edited.",
                    field="replaces",
                    details={"last_user_message_id": str(replaced.pk) if replaced else None},
                )
            superseded = _supersede(locked, from_position=replaced.position)
        # Each row names the other: the ids are chosen first, and the foreign
        # keys are checked at commit.
        reservation = _budget_reserve(locked)
        message_id = uuid.uuid4()
        run = Run(
            conversation=locked,
            mode=locked.mode,
            system_prompt=system_prompt_for(locked),
            trace_parent=turn_trace_parent(),
            trigger_message_id=message_id,
            budget=reservation.budget,
        )
        row_insert(run)
        message = Message(
            id=message_id,
            conversation=locked,
            run=run,
            position=0 if last_position is None else last_position + 1,
            role=Role.USER,
            content=content,
            images=images_store(owner_id=locked.owner_id, images=images),
        )
        row_insert(message)
        # Queued first on commit, before the events below are sent: the run's first
        # token waits on the queue, and a client reads the events by seq whatever
        # their order of arrival (a send to Redis takes half a millisecond). Robust:
        # a dispatch that raises must not keep the events from being sent.
        transaction.on_commit(lambda: dispatch_run(run.pk), robust=True)
        if superseded:
            _superseded_publish(run, superseded)
        # So that the user's other tabs (and any client) see it, ahead of the run's
        # events (its seq is lower, and streams deliver in seq order).
        events_publish(run=run, events=[_user_message_event(message), *reservation.warnings])
    return run


def _budget_reserve(conversation: Conversation) -> Reservation:
    """The budget a new run of the conversation starts under; BudgetExceeded refuses it.

    The limits covering its owner came with the conversation's lock (chat/services/turn_lock.py).
    """
    return budget_reserve(
        user_id=conversation.owner_id,
        model=conversation.model,
        limits=vars(conversation)["budget_limits"],
        owner_locked=vars(conversation)["owner_locked"],
    )


def _user_message_event(message: Message) -> MessageCreated:
    """The `message.created` of a user's message: other tabs and clients show it at once."""
    return MessageCreated(message_id=str(message.pk), role="user", message=message_to_api(message))


def run_regenerate(*, conversation: Conversation, client: ClientTurn | None = None) -> Run:
    """A new answer to the last user message; the previous answer stays in the record.

    With `client`: a /v1 client sending again a request whose turn failed
    (chat/openai_api/); its tools and options go with the new run.
    """
    with idle_conversation(conversation) as (locked, _):
        question = _last_user_message(locked)
        if question is None:
            raise Conflict("There is no question to answer again: post a message first.")
        reservation = _budget_reserve(locked)
        superseded = _supersede(locked, from_position=question.position + 1)
        # The question stays with the run it was posted with (its audit keeps it); the
        # message list shows the outcome of the newest run it triggered.
        run = Run.objects.create(
            conversation=locked,
            mode=locked.mode,
            system_prompt=system_prompt_for(locked),
            trace_parent=turn_trace_parent(),
            trigger_message=question,
            client_tools=client.tools or None if client else None,
            client_options=client.options if client else None,
            budget=reservation.budget,
        )
        # Always announced, even with nothing superseded (a failed turn has no answer):
        # a page clears what it showed after the question (an error, a Retry button).
        _superseded_publish(run, superseded, after_message_id=str(question.pk))
        if reservation.warnings:
            events_publish(run=run, events=list(reservation.warnings))
        transaction.on_commit(lambda: dispatch_run(run.pk))
    return run


def content_check(content: Any, *, images: bool = False) -> None:
    """Refuse what no path may store as a user message (the REST serializer, the socket).

    A message with `images` may have no text.
    """
    if not isinstance(content, str) or not (images or _visible(content)):
        raise InvalidInput("The message is empty.", field="content")
    _storable_check(content, what="The message", field="content")


def _storable_check(content: str, *, what: str, field: str) -> None:
    """Refuse text no column may store (NUL, lone surrogates) or longer than a message may be."""
    if "\x00" in content:
        raise InvalidInput(f"{what} contains a NUL character.", field=field)
    try:
        content.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(
            f"{what} is not valid Unicode text (it has a lone surrogate).", field=field
        ) from None
    limit = settings.MAX_MESSAGE_CHARS
    if len(content) > limit:
        raise InvalidInput(
            f"{what} is {len(content):,} characters long; the limit is {limit:,}.",
            field=field,
            details={"max_chars": limit, "chars": len(content)},
        )


def _last_user_message(conversation: Conversation) -> Message | None:
    return current_messages(conversation.pk).filter(role=Role.USER).order_by("-position").first()


def _supersede(conversation: Conversation, *, from_position: int) -> list[str]:
    """Take the current messages from this position on out of the conversation; their ids."""
    rows = current_messages(conversation.pk).filter(position__gte=from_position)
    ids = [str(pk) for pk in rows.values_list("pk", flat=True)]
    rows.update(superseded_at=timezone.now())
    return ids


def _superseded_publish(
    run: Run, message_ids: list[str], *, after_message_id: str | None = None
) -> None:
    superseded = MessagesSuperseded(message_ids=message_ids, after_message_id=after_message_id)
    event_publish(run=run, event=superseded)


def _visible(text: str) -> bool:
    """Whether the text shows anything: not only spaces, controls and invisible format marks."""
    return any(
        not char.isspace() and unicodedata.category(char) not in ("Cc", "Cf") for char in text
    )


def run_cancel(*, run: Run) -> Run:
    """Stop a queued or running run; unanswered tool calls get a 'cancelled' result."""
    with transaction.atomic():
        # With its conversation: the turn's end is counted by its model (chat/telemetry/).
        locked = (
            Run.objects.select_for_update(no_key=True, of=("self",))
            .select_related("conversation")
            .get(pk=run.pk)
        )
        if locked.status not in ACTIVE_RUN_STATUSES:
            raise Conflict(
                f"The run is already {locked.status}; only a queued or running run can be cancelled.",
                details={"run_id": str(locked.pk), "status": locked.status},
            )
        with run_end(locked, RunEnd.cancelled(), lease=None):
            pass  # nothing ends with it but its open calls, which run_end answers
    return locked


def run_cancel_by_id(*, conversation_id: Any, run_id: Any) -> Run:
    """Cancel a run of the given conversation (RunNotFound if it is not one of its runs)."""
    try:
        run = Run.objects.get(pk=run_id, conversation_id=conversation_id)
    except (Run.DoesNotExist, ValueError, ValidationError):
        raise RunNotFound("No such run in this conversation.", field="run_id") from None
    return run_cancel(run=run)


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


def client_run_start(*, conversation: Conversation, turn: ClientTurn) -> Run:
    """Store what a /v1 request adds (history, client tool results, a user message) and a run.

    In one transaction with the conversation's lock, as `run_start`; the
    results answer the calls the conversation's last run returned to the
    client (`client` executions), which become `succeeded` with what the
    model is sent. The run continues the turn from there.
    """
    if turn.content is not None:
        content_check(turn.content, images=bool(turn.images))
    with idle_conversation(conversation) as (locked, last_position):
        reservation = _budget_reserve(locked)
        position = 0 if last_position is None else last_position + 1
        run_id = uuid.uuid4()
        owner_id = locked.owner_id
        answered = _client_calls_answered(locked, turn.results, run_id=run_id)
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
            events.append(_user_message_event(user))
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
    _storable_check(content, what="A message", field="messages")
