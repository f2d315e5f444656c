"""Runs: start one for a user message, answer it again, cancel it. The engine (chat/engine/) executes them.

A /v1 client's turns (its history, its tools' results) are chat/services/client_turns.py's.
"""

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
from chat.engine.ledger import budget_warnings, messages_superseded, user_message_created
from chat.exceptions import Conflict, InvalidInput, RunNotFound
from chat.images import ImageInput
from chat.live.events import event_publish, events_publish
from chat.models import (
    ACTIVE_RUN_STATUSES,
    Conversation,
    Message,
    Role,
    Run,
)
from chat.prompts import system_prompt_for
from chat.selectors import current_messages
from chat.services.images import images_store
from chat.services.turn_lock import idle_conversation
from chat.statements import row_insert
from chat.telemetry.propagation import turn_trace_parent


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
        reservation = run_budget_reserve(locked)
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
        events_publish(run=run, events=[user_message_created(message), *reservation.warnings])
    return run


def run_budget_reserve(conversation: Conversation) -> Reservation:
    """The budget a new run of the conversation starts under; BudgetExceeded refuses it.

    The limits covering its owner came with the conversation's lock (chat/services/turn_lock.py);
    the soft ones reached come with their `budget.warning` events, the ledger's.
    """
    reserved = budget_reserve(
        user_id=conversation.owner_id,
        model=conversation.model,
        limits=vars(conversation)["budget_limits"],
        owner_locked=vars(conversation)["owner_locked"],
    )
    return dataclasses.replace(reserved, warnings=budget_warnings(reserved.reached))


def run_regenerate(
    *,
    conversation: Conversation,
    client_tools: list[dict[str, Any]] | None = None,
    client_options: dict[str, Any] | None = None,
) -> Run:
    """A new answer to the last user message; the previous answer stays in the record.

    With a /v1 client's tools and options (chat/services/client_turns.py
    `client_run_regenerate`: a request sent again after its turn failed), they
    go with the new run.
    """
    with idle_conversation(conversation) as (locked, _):
        question = _last_user_message(locked)
        if question is None:
            raise Conflict("There is no question to answer again: post a message first.")
        reservation = run_budget_reserve(locked)
        superseded = _supersede(locked, from_position=question.position + 1)
        # The question stays with the run it was posted with (its audit keeps it); the
        # message list shows the outcome of the newest run it triggered.
        run = Run.objects.create(
            conversation=locked,
            mode=locked.mode,
            system_prompt=system_prompt_for(locked),
            trace_parent=turn_trace_parent(),
            trigger_message=question,
            client_tools=client_tools or None,
            client_options=client_options,
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
    storable_check(content, what="The message", field="content")


def storable_check(content: str, *, what: str, field: str) -> None:
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
    superseded = messages_superseded(message_ids, after_message_id=after_message_id)
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
