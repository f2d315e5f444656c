"""Writes on conversations: create, change and delete one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction

from chat.exceptions import Conflict, ConversationNotFound, InvalidInput
from chat.llm.endpoints import UnknownModel, model_allowed, model_choices
from chat.models import ACTIVE_RUN_STATUSES, MAX_STEPS_LIMIT, Conversation, Mode, Run, Source
from chat.services.runs import run_cancel

if TYPE_CHECKING:
    from django.contrib.auth.models import User

DEFAULT_MAX_STEPS: int = Conversation._meta.get_field("max_steps").get_default()
TITLE_MAX_LENGTH: int = Conversation._meta.get_field("title").max_length or 200
MODEL_MAX_LENGTH: int = Conversation._meta.get_field("model").max_length or 128


def settings_check(
    *,
    title: str | None = None,
    mode: str | None = None,
    max_steps: int | None = None,
    system_prompt: str | None = None,
    model: str | None = None,
) -> None:
    """Refuse bad settings (None: not given) with InvalidInput naming the field at fault."""
    if mode is not None and mode not in Mode.values:
        raise InvalidInput(
            f"mode must be one of {', '.join(Mode.values)}, not {mode!r}.", field="mode"
        )
    if max_steps is not None:
        # bool is an int to Python, not to a client that sent `true`.
        if isinstance(max_steps, bool) or not isinstance(max_steps, int):
            raise InvalidInput("max_steps must be an integer.", field="max_steps")
        if not 1 <= max_steps <= MAX_STEPS_LIMIT:
            raise InvalidInput(
                f"max_steps must be between 1 and {MAX_STEPS_LIMIT}.", field="max_steps"
            )
    if title is not None and len(title) > TITLE_MAX_LENGTH:
        raise InvalidInput(f"title is longer than {TITLE_MAX_LENGTH} characters.", field="title")
    if model is not None and len(model) > MODEL_MAX_LENGTH:
        raise InvalidInput(f"model is longer than {MODEL_MAX_LENGTH} characters.", field="model")
    limit = settings.MAX_SYSTEM_PROMPT_CHARS
    if system_prompt is not None and len(system_prompt) > limit:
        raise InvalidInput(
            f"system_prompt is {len(system_prompt):,} characters long; the limit is {limit:,}.",
            field="system_prompt",
            details={"max_chars": limit, "chars": len(system_prompt)},
        )


def model_chosen(model: str | None) -> str | None:
    """The id (`<provider>/<model>`) of the model chosen: None not given, "" the default.

    Any model `GET /api/v1/models/` lists may be chosen, by its id or, with one
    provider, by its bare name; another is InvalidInput listing those allowed.
    """
    if not model:
        return model
    try:
        return model_allowed(model).id
    except UnknownModel:
        allowed = [choice.id for choice in model_choices()]
        raise InvalidInput(
            f"model {model!r} is not offered here; choose one of {', '.join(allowed)} "
            "(GET /api/v1/models/), or leave it empty for the default.",
            field="model",
            details={"allowed": allowed},
        ) from None


def conversation_create(
    *,
    owner: User,
    title: str = "",
    mode: str = Mode.TWO_PASS,
    max_steps: int = DEFAULT_MAX_STEPS,
    system_prompt: str = "",
    model: str = "",
    source: str = Source.API,
) -> Conversation:
    """Create a conversation for `owner`; InvalidInput names the field at fault."""
    settings_check(
        title=title, mode=mode, max_steps=max_steps, system_prompt=system_prompt, model=model
    )
    model = model_chosen(model) or ""
    # One INSERT, atomic by itself: no block of its own (inside a caller's transaction,
    # as a /v1 request's turn start, that was a savepoint and its release, two more
    # round trips).
    return Conversation.objects.create(
        owner=owner,
        title=title,
        mode=mode,
        max_steps=max_steps,
        system_prompt=system_prompt,
        model=model,
        source=source,
    )


def conversation_update(
    *,
    conversation: Conversation,
    title: str | None = None,
    mode: str | None = None,
    max_steps: int | None = None,
    system_prompt: str | None = None,
    model: str | None = None,
) -> Conversation:
    """Change the settings given (None leaves one as it is); InvalidInput names the field at fault.

    The keyword arguments are the whitelist, as the `fields` of HackSoft's
    `model_update`: the owner, the id and the timestamps cannot change here.
    Everything is checked, as conversation_create checks it, before anything
    changes; only the fields whose value differs are written.
    """
    settings_check(
        title=title, mode=mode, max_steps=max_steps, system_prompt=system_prompt, model=model
    )
    model = model_chosen(model)
    given: dict[str, Any] = {
        "title": title,
        "mode": mode,
        "max_steps": max_steps,
        "system_prompt": system_prompt,
        "model": model,
    }
    changes = {
        field: value
        for field, value in given.items()
        if value is not None and getattr(conversation, field) != value
    }
    if not changes:
        return conversation
    with transaction.atomic():
        for field, value in changes.items():
            setattr(conversation, field, value)
        conversation.save(update_fields=[*changes, "updated_at"])
    return conversation


def conversation_metadata_set(
    *, conversation: Conversation, metadata: dict[str, str]
) -> Conversation:
    """Replace a /v1/conversations client's metadata (checked by the caller, as OpenAI bounds it)."""
    conversation.client_metadata = metadata
    conversation.save(update_fields=["client_metadata", "updated_at"])
    return conversation


def conversation_delete(*, conversation: Conversation) -> None:
    """Delete a conversation and everything recorded in it; Conflict while a run is active.

    The replays of its runs go with it (docs/replay.md), each in a conversation
    of its own: one still running is cancelled first, in the same transaction,
    as a cancel would end it (its watchers hear `run.cancelled`, its open
    calls are answered), so its worker stops as a cancelled run's does
    instead of failing on rows that are gone.
    """
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
        _replays_cancel(locked)
        locked.delete()


def _replays_cancel(conversation: Conversation) -> None:
    """Cancel the active replays of the conversation's runs, and of their replays."""
    replayed = set(Run.objects.filter(conversation=conversation).values_list("pk", flat=True))
    while replayed:
        replicas = list(
            Run.objects.filter(replay_of__in=replayed)
            .select_related("conversation")
            .only("pk", "status", "conversation")
        )
        for replica in replicas:
            if replica.status in ACTIVE_RUN_STATUSES:
                run_cancel(run=replica)
        replayed = {replica.pk for replica in replicas}
