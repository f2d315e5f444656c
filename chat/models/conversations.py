"""Conversations and their messages, in the OpenAI Chat Completions shape.

One column per OpenAI field, and the role rules are CheckConstraints, so that
the database itself refuses a row the OpenAI API would refuse.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from tools.fields import StorableCharField, StorableJSONField, StorableTextField


class Source(models.TextChoices):
    """Where a conversation came from: the chat page, the REST API, or a /v1 client."""

    CHAT = "chat", "Chat page"
    API = "api", "REST API"
    V1 = "v1", "OpenAI-compatible API"
    # A /v1 client's background task (Open WebUI's title, tags, follow-ups): one
    # conversation per task, left out of the conversation list (chat/openai_api/tasks.py).
    TASK = "task", "A /v1 client's background task"


class Mode(models.TextChoices):
    """How a run continues after its tools (chat/engine/continuation.py)."""

    TWO_PASS = "two_pass", "Two-pass composition"
    LOOP = "loop", "Agent loop"
    DIRECT = "direct", "Direct reply"
    LLM = "llm", "LLM decider (structured output, for models without tool calling)"


MAX_STEPS_LIMIT = 50


class Conversation(models.Model):
    """A chat between one user and the assistant."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = StorableCharField(max_length=200, blank=True)
    mode = models.CharField(max_length=16, choices=Mode.choices, default=Mode.TWO_PASS)
    max_steps = models.PositiveSmallIntegerField(default=5)
    model = StorableCharField(max_length=128, blank=True, help_text="Overrides LLM_MODEL.")
    system_prompt = StorableTextField(blank=True)
    # The last RunEvent.seq handed out in this conversation: events are numbered
    # by bumping it under the row lock (chat/live/events.py).
    last_event_seq = models.BigIntegerField(default=0, editable=False)
    # For a conversation held through /v1/chat/completions (chat/openai_api/): the digest
    # of the history its client saw last, which the client's next request begins with,
    # and the client's own name for the conversation (an X-OpenWebUI-Chat-Id), if any.
    client_digest = models.CharField(max_length=64, blank=True, default="", editable=False)
    client_ref = StorableCharField(max_length=200, blank=True, default="", editable=False)
    # A /v1/conversations client's `metadata` (chat/openai_api/conversations.py): at most
    # 16 string pairs, as OpenAI bounds it.
    client_metadata = StorableJSONField(default=dict, blank=True, editable=False)
    # A replay's own conversation (chat/services/replays.py): the run it replays. Left
    # out of the conversation list, reachable by id, deleted with the original.
    replay_of = models.ForeignKey(
        "Run", null=True, blank=True, on_delete=models.CASCADE, related_name="+", editable=False
    )
    source = models.CharField(
        max_length=8, choices=Source.choices, default=Source.API, editable=False
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [
            models.Index(fields=["owner", "-updated_at"], name="conversation_owner_recent"),
            # A /v1 request's history is found by its digest among its user's conversations.
            models.Index(
                fields=["owner", "client_digest"],
                condition=~Q(client_digest=""),
                name="conversation_client_digest",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "client_ref"],
                condition=~Q(client_ref=""),
                name="conversation_client_ref_unique",
            ),
            models.CheckConstraint(
                condition=Q(mode__in=Mode.values), name="conversation_mode_valid"
            ),
            models.CheckConstraint(
                condition=Q(max_steps__gte=1, max_steps__lte=MAX_STEPS_LIMIT),
                name="conversation_max_steps_range",
            ),
        ]

    def __str__(self) -> str:
        return self.title or f"Conversation {self.id}"


class Role(models.TextChoices):
    SYSTEM = "system", "System"
    USER = "user", "User"
    ASSISTANT = "assistant", "Assistant"
    TOOL = "tool", "Tool"


class Message(models.Model):
    """One message of a conversation, in OpenAI Chat Completions shape."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of its own: the unique (conversation, position) index begins with it.
    # With both, PostgreSQL took this one for a conversation it expected to be short,
    # and read and sorted all its rows to find the newest (chat/selectors.py).
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages", db_index=False
    )
    run = models.ForeignKey(
        "Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="messages"
    )
    position = models.PositiveIntegerField()
    role = models.CharField(max_length=16, choices=Role.choices)
    content = StorableTextField(null=True, blank=True)
    tool_calls = StorableJSONField(null=True, blank=True)
    tool_call_id = StorableCharField(max_length=128, null=True, blank=True, db_index=True)
    name = StorableCharField(max_length=64, null=True, blank=True)
    resource = models.ForeignKey(
        "tools.Resource", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    model = StorableCharField(max_length=128, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    # What the model call that wrote it cost, in US dollars (NULL: no price for its model).
    cost_usd = models.DecimalField(max_digits=16, decimal_places=8, null=True, blank=True)
    finish_reason = StorableCharField(max_length=32, blank=True)
    # Follow-up prompts offered after a final answer (from its tools' results and the model).
    suggestions = StorableJSONField(null=True, blank=True)
    # What the model wrote before its answer (`reasoning_content`, `reasoning`), assistant
    # only: shown and exported on request, never sent back to a model.
    # The database default keeps inserts of code that predates the column working.
    reasoning = StorableTextField(blank=True, default="", db_default="")
    # A user message's images (chat/images.py), in order: each one's Resource (which
    # holds its bytes) and what it is (media type, size, detail, or its https URL).
    images = StorableJSONField(null=True, blank=True)
    # Set when a regenerated answer or an edited question replaced this message: it stays
    # in the record (and the audit) but leaves the conversation a model or a reader sees.
    superseded_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "position"], name="message_position_unique"
            ),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="message_role_valid"),
            # A tool message answers one call: it names the call and the tool.
            models.CheckConstraint(
                condition=~Q(role=Role.TOOL)
                | (
                    Q(tool_call_id__isnull=False, name__isnull=False)
                    & ~Q(tool_call_id="")
                    & ~Q(name="")
                ),
                name="message_tool_has_call_id_and_name",
            ),
            # ...and only a tool message does.
            models.CheckConstraint(
                condition=Q(role=Role.TOOL) | Q(tool_call_id__isnull=True, name__isnull=True),
                name="message_call_id_only_on_tool",
            ),
            # Only the assistant calls tools and has a latency.
            models.CheckConstraint(
                condition=Q(role=Role.ASSISTANT)
                | Q(tool_calls__isnull=True, latency_ms__isnull=True),
                name="message_tool_calls_only_on_assistant",
            ),
            # Only a user's message carries images.
            models.CheckConstraint(
                condition=Q(role=Role.USER) | Q(images__isnull=True),
                name="message_images_only_on_user",
            ),
            # Only a model's answer has reasoning.
            models.CheckConstraint(
                condition=Q(role=Role.ASSISTANT) | Q(reasoning=""),
                name="message_reasoning_only_on_assistant",
            ),
            # Content may be missing only where tool_calls say what the message is.
            models.CheckConstraint(
                condition=Q(content__isnull=False)
                | Q(role=Role.ASSISTANT, tool_calls__isnull=False),
                name="message_content_null_only_with_tool_calls",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role} #{self.position}"
