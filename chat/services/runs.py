"""Runs: start one for a user message, cancel it. The engine (chat/engine/) executes them."""

from __future__ import annotations

import unicodedata
import uuid
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import OuterRef, Subquery

from chat.engine.dispatch import dispatch_run
from chat.engine.finish import run_end
from chat.exceptions import Conflict, InvalidInput, RunNotFound
from chat.history import message_to_api
from chat.live.events import event_publish
from chat.models import (
    ACTIVE_RUN_STATUSES,
    Conversation,
    Message,
    Role,
    Run,
    RunStatus,
)
from tools.results import cancelled_result


def run_start(
    *,
    conversation: Conversation,
    content: str,
    user: AbstractBaseUser | AnonymousUser | None = None,
) -> Run:
    """Store the user's message and a queued run in one transaction; queue the run on commit."""
    if not isinstance(content, str) or not _visible(content):
        raise InvalidInput("The message is empty.", field="content")
    # What the REST serializer refuses, refused here for every path (the socket too).
    if "\x00" in content:
        raise InvalidInput("The message contains a NUL character.", field="content")
    try:
        content.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(
            "The message is not valid Unicode text (it has a lone surrogate).", field="content"
        ) from None
    limit = settings.MAX_MESSAGE_CHARS
    if len(content) > limit:
        raise InvalidInput(
            f"The message is {len(content):,} characters long; the limit is {limit:,}.",
            field="content",
            details={"max_chars": limit, "chars": len(content)},
        )
    try:
        with transaction.atomic():
            # The conversation row lock orders concurrent posts to one conversation;
            # the same statement finds an active run and the last position.
            locked = (
                Conversation.objects.select_for_update(no_key=True, of=("self",))
                .annotate(
                    active_run_id=Subquery(
                        Run.objects.filter(
                            conversation_id=OuterRef("pk"), status__in=ACTIVE_RUN_STATUSES
                        ).values("pk")[:1]
                    ),
                    last_position=Subquery(
                        Message.objects.filter(conversation_id=OuterRef("pk"))
                        .order_by("-position")
                        .values("position")[:1]
                    ),
                )
                .get(pk=conversation.pk)
            )
            if locked.active_run_id is not None:
                raise _busy(Run.objects.get(pk=locked.active_run_id))
            # Each row names the other: the ids are chosen first, and the foreign
            # keys are checked at commit.
            message_id = uuid.uuid4()
            run = Run.objects.create(
                conversation=locked, mode=locked.mode, trigger_message_id=message_id
            )
            message = Message.objects.create(
                id=message_id,
                conversation=locked,
                run=run,
                position=0 if locked.last_position is None else locked.last_position + 1,
                role=Role.USER,
                content=content,
            )
            locked.save(update_fields=["updated_at"])
            # So that the user's other tabs (and any client) see it before the run starts.
            event_publish(
                run=run,
                type="message.created",
                data={
                    "message_id": str(message_id),
                    "role": "user",
                    "message": message_to_api(message),
                },
            )
            transaction.on_commit(lambda: dispatch_run(run.pk))
    except IntegrityError:
        # The database's one-active-run constraint caught a race the lock did not.
        active = Run.objects.filter(
            conversation=conversation, status__in=ACTIVE_RUN_STATUSES
        ).first()
        if active is None:
            raise
        raise _busy(active) from None
    return run


def _visible(text: str) -> bool:
    """Whether the text shows anything: not only spaces, controls and invisible format marks."""
    return any(
        not char.isspace() and unicodedata.category(char) not in ("Cc", "Cf") for char in text
    )


def _busy(active: Run) -> Conflict:
    return Conflict(
        "A run of this conversation is still in progress; wait for it or cancel it.",
        details={"run_id": str(active.pk), "status": active.status},
    )


def run_cancel(*, run: Run) -> Run:
    """Stop a queued or running run; unanswered tool calls get a 'cancelled' result."""
    with transaction.atomic():
        locked = Run.objects.select_for_update(no_key=True).get(pk=run.pk)
        if locked.status not in ACTIVE_RUN_STATUSES:
            raise Conflict(
                f"The run is already {locked.status}; only a queued or running run can be cancelled.",
                details={"run_id": str(locked.pk), "status": locked.status},
            )
        unfinished = run_end(locked, status=RunStatus.CANCELLED, result_for=cancelled_result)
        event_publish(
            run=locked,
            type="run.cancelled",
            data={"cancelled_tool_calls": [e.tool_call_id for e in unfinished]},
        )
    return locked


def run_cancel_by_id(*, conversation_id: Any, run_id: Any) -> Run:
    """Cancel a run of the given conversation (RunNotFound if it is not one of its runs)."""
    try:
        run = Run.objects.get(pk=run_id, conversation_id=conversation_id)
    except (Run.DoesNotExist, ValueError, ValidationError):
        raise RunNotFound("No such run in this conversation.", field="run_id") from None
    return run_cancel(run=run)
