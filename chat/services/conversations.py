"""Writes on conversations: creating one, importing an OpenAI-format history into it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Max, Q

from chat.exceptions import Conflict, ConversationNotFound, InvalidHistory, InvalidInput
from chat.history import open_tool_calls, openai_to_rows
from chat.models import (
    ACTIVE_RUN_STATUSES,
    MAX_STEPS_LIMIT,
    Conversation,
    Message,
    Mode,
    Role,
    Run,
)
from tools.models import Resource

if TYPE_CHECKING:
    from django.contrib.auth.models import User

DEFAULT_MAX_STEPS: int = Conversation._meta.get_field("max_steps").get_default()
TITLE_MAX_LENGTH: int = Conversation._meta.get_field("title").max_length or 200
MODEL_MAX_LENGTH: int = Conversation._meta.get_field("model").max_length or 128


def conversation_create(
    *,
    owner: User,
    title: str = "",
    mode: str = Mode.TWO_PASS,
    max_steps: int = DEFAULT_MAX_STEPS,
    system_prompt: str = "",
    model: str = "",
) -> Conversation:
    """Create a conversation for `owner`; InvalidInput names the field at fault."""
    if mode not in Mode.values:
        raise InvalidInput(
            f"mode must be one of {', '.join(Mode.values)}, not {mode!r}.", field="mode"
        )
    # bool is an int to Python, not to a client that sent `true`.
    if isinstance(max_steps, bool) or not isinstance(max_steps, int):
        raise InvalidInput("max_steps must be an integer.", field="max_steps")
    if not 1 <= max_steps <= MAX_STEPS_LIMIT:
        raise InvalidInput(f"max_steps must be between 1 and {MAX_STEPS_LIMIT}.", field="max_steps")
    if len(title) > TITLE_MAX_LENGTH:
        raise InvalidInput(f"title is longer than {TITLE_MAX_LENGTH} characters.", field="title")
    if len(model) > MODEL_MAX_LENGTH:
        raise InvalidInput(f"model is longer than {MODEL_MAX_LENGTH} characters.", field="model")
    with transaction.atomic():
        return Conversation.objects.create(
            owner=owner,
            title=title,
            mode=mode,
            max_steps=max_steps,
            system_prompt=system_prompt,
            model=model,
        )


def conversation_import_messages(
    *, conversation: Conversation, messages: list[dict[str, Any]]
) -> list[Message]:
    """Append OpenAI-format messages after the last stored one; all or nothing.

    Raises InvalidHistory (naming the index of the bad message) for input that
    is not a valid OpenAI history or cannot be stored, and Conflict while a run
    is active, since the run appends messages of its own.
    """
    with transaction.atomic():
        # The row lock serializes appends to one conversation, so two writers
        # cannot pick the same next position.
        Conversation.objects.select_for_update(no_key=True).only("pk").get(pk=conversation.pk)
        if Run.objects.filter(conversation=conversation, status__in=ACTIVE_RUN_STATUSES).exists():
            raise Conflict("A run is active in this conversation; import after it ends.")
        stored = Message.objects.filter(conversation=conversation)
        last = stored.aggregate(last=Max("position"))["last"]
        # Calls stored without an answer may be answered by the imported messages.
        pending = open_tool_calls(
            {"role": role, "tool_calls": tool_calls, "tool_call_id": tool_call_id}
            for role, tool_calls, tool_call_id in stored.filter(
                Q(role=Role.ASSISTANT, tool_calls__isnull=False) | Q(role=Role.TOOL)
            )
            .order_by("position")
            .values_list("role", "tool_calls", "tool_call_id")
        )
        rows = openai_to_rows(
            messages,
            conversation=conversation,
            start_position=0 if last is None else last + 1,
            open_calls=pending,
        )
        if not rows:
            return rows
        _check_resources(rows, conversation=conversation)
        Message.objects.bulk_create(rows, batch_size=500)
        conversation.save(update_fields=["updated_at"])
        return rows


def _check_resources(rows: list[Message], *, conversation: Conversation) -> None:
    """Refuse links to resources that do not exist or belong to someone else."""
    wanted = {row.resource_id for row in rows if row.resource_id is not None}
    if not wanted:
        return
    found = set(
        Resource.objects.filter(pk__in=wanted, owner_id=conversation.owner_id).values_list(
            "pk", flat=True
        )
    )
    for index, row in enumerate(rows):
        if row.resource_id is not None and row.resource_id not in found:
            raise InvalidHistory(
                f"Message {index} (tool): resource {row.resource_id} does not exist "
                "or is not the conversation owner's.",
                index=index,
                field="messages",
            )


def conversation_update(*, conversation: Conversation, **fields: Any) -> Conversation:
    """Change the given fields of a conversation (already validated) and return it."""
    if not fields:
        return conversation
    with transaction.atomic():
        for name, value in fields.items():
            setattr(conversation, name, value)
        conversation.save(update_fields=[*fields, "updated_at"])
    return conversation


def conversation_delete(*, conversation: Conversation) -> None:
    """Delete a conversation and everything recorded in it; Conflict while a run is active."""
    with transaction.atomic():
        # The row lock orders this after a concurrent run_start, which takes it too.
        locked = (
            Conversation.objects.select_for_update(no_key=True).filter(pk=conversation.pk).first()
        )
        if locked is None:
            raise ConversationNotFound("Conversation not found.")
        active = Run.objects.filter(conversation=locked, status__in=ACTIVE_RUN_STATUSES).first()
        if active is not None:
            raise Conflict(
                "A run of this conversation is in progress; cancel it before deleting.",
                details={"run_id": str(active.pk), "status": active.status},
            )
        locked.delete()
