"""Reads: conversations, their messages, and the history a model is sent."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from chat.exceptions import ConversationNotFound
from chat.history import build_model_history
from chat.models import Conversation, Message

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

# What message_to_openai reads; the other columns stay in the database.
HISTORY_COLUMNS = ("id", "position", "role", "content", "tool_calls", "tool_call_id")


def conversation_get(
    *, conversation_id: uuid.UUID | str, user: AbstractBaseUser | AnonymousUser
) -> Conversation:
    """The user's own conversation; ConversationNotFound for a missing or foreign one."""
    try:
        return Conversation.objects.get(pk=conversation_id, owner_id=user.pk)
    except (Conversation.DoesNotExist, ValidationError, ValueError):
        # Someone else's conversation is "not found" too: its existence is not ours to tell.
        raise ConversationNotFound("Conversation not found.") from None


def message_list(*, conversation: Conversation) -> QuerySet[Message]:
    """The conversation's messages in order, for the API and the export (see message_to_api)."""
    return Message.objects.filter(conversation_id=conversation.pk).order_by("position")


def history_for_model(
    *,
    conversation: Conversation,
    max_messages: int | None = None,
    max_chars: int | None = None,
) -> list[dict[str, Any]]:
    """The messages to send to a model: valid OpenAI history, in one query whatever its length."""
    rows = (
        Message.objects.filter(conversation_id=conversation.pk)
        .order_by("position")
        .only(*HISTORY_COLUMNS)
    )
    return build_model_history(
        rows,
        system_prompt=conversation.system_prompt,
        max_messages=max_messages,
        max_chars=max_chars,
    )
