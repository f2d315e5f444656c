"""Output shapes that several APIs share: conversations, messages, runs, events, errors.

A run's model calls and tool executions (its audit rows) are chat/api/call_serializers.py's.

Each API declares its own InputSerializer; what it answers is one of these,
so that a run looks the same in a 202, a 200 after waiting, the run detail
and a cancel. Messages are rendered by `chat.history.message_to_api` (the one
codec) and runs by `run_data`; `MessageSerializer` only describes that shape
for the schema, and `RunSerializer` describes (and makes, in a test) the one
`run_data` makes.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from chat.api.call_serializers import ModelCallSerializer, ToolExecutionSerializer
from chat.api.run_data import calls_usage
from chat.history import message_to_api
from chat.live.event_types import EVENT_TYPES
from chat.llm.endpoints import default_model
from chat.models import (
    Conversation,
    Message,
    Mode,
    ReplayMode,
    ReplayTools,
    Role,
    Run,
    RunStatus,
    model_steps,
)


class ConversationSerializer(serializers.ModelSerializer[Conversation]):
    """A conversation, with the run it is processing now (if any)."""

    active_run_id = serializers.UUIDField(
        read_only=True,
        allow_null=True,
        help_text="The queued or running run; posting a message waits until it ends.",
    )
    last_event_seq = serializers.IntegerField(
        read_only=True, help_text="The seq of the newest event: resume live events after it."
    )
    replay_of = serializers.UUIDField(
        source="replay_of_id",
        read_only=True,
        allow_null=True,
        help_text="A replay's conversation: the run it replays (such conversations are left "
        "out of the list). Null for any other.",
    )

    model = serializers.SerializerMethodField(
        help_text="The model it talks to (`<provider>/<model>`): its own, or the default "
        'model\'s when it has none (`PATCH` with `""` goes back to the default).'
    )

    class Meta:
        model = Conversation
        fields = [
            "id",
            "title",
            "mode",
            "max_steps",
            "model",
            "system_prompt",
            "active_run_id",
            "last_event_seq",
            "replay_of",
            "source",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "system_prompt": {
                "help_text": "The conversation's own system prompt; blank: the server's default."
            },
            "source": {
                "help_text": "Where it came from: `chat` (the chat page), `api` (this API with "
                "a token), `v1` (an OpenAI-compatible client, docs/openai-api.md) or `task` "
                "(such a client's background task; left out of the list)."
            },
        }

    def get_model(self, conversation: Conversation) -> str:
        """Its own model, or the one it uses without one: never ""."""
        return conversation.model or default_model()


class UsageSerializer(serializers.Serializer[Any]):
    """Token usage as the model reported it, and its cost."""

    prompt_tokens = serializers.IntegerField(allow_null=True)
    completion_tokens = serializers.IntegerField(allow_null=True)
    cost_usd = serializers.FloatField(
        allow_null=True,
        help_text="US dollars, from the provider's prices; null when its model has no price.",
    )


class RunUsageSerializer(UsageSerializer):
    """A run's model calls' usage, summed (null for what none of them reported)."""

    cached_tokens = serializers.IntegerField(
        allow_null=True, help_text="Of the prompt tokens, those the server had cached."
    )


class FunctionCallSerializer(serializers.Serializer[Any]):
    """The function a tool call names, with its arguments as JSON text."""

    name = serializers.CharField()
    arguments = serializers.CharField(help_text="JSON text, exactly as the model sent it.")


class CustomCallSerializer(serializers.Serializer[Any]):
    """A custom (free-form input) tool call."""

    name = serializers.CharField()
    input = serializers.CharField()


class ToolCallSerializer(serializers.Serializer[Any]):
    """One entry of an assistant message's `tool_calls`, in OpenAI shape."""

    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["function", "custom"])
    function = FunctionCallSerializer(required=False)
    custom = CustomCallSerializer(required=False)


class TurnSerializer(serializers.Serializer[Any]):
    """How the turn a user message started went (user messages in the message list)."""

    run_id = serializers.UUIDField(
        help_text="The newest run on this message: a regenerated answer's, or `run_id`."
    )
    status = serializers.ChoiceField(choices=RunStatus.choices)
    error = serializers.CharField(allow_null=True, help_text="Why the run failed, if it did.")
    latency_ms = serializers.IntegerField(
        allow_null=True, help_text="The whole turn, from posting to its end."
    )
    model_calls = serializers.IntegerField()


class ResourceSummarySerializer(serializers.Serializer[Any]):
    """A record a tool made or read, as a card shows it."""

    id = serializers.UUIDField()
    kind = serializers.CharField()
    title = serializers.CharField()
    created_at = serializers.DateTimeField()
    created_by_execution_id = serializers.UUIDField(
        allow_null=True, help_text="The tool call that made it (GET /api/v1/tool-executions/)."
    )


class MessageImageSerializer(serializers.Serializer[Any]):
    """One image of a user message: what it is; its bytes are its resource's."""

    resource_id = serializers.UUIDField(
        help_text="The `image` resource that holds it (GET /api/v1/resources/{id}/: "
        "`data.data` is its bytes, base64, or `data.url` its URL)."
    )
    media_type = serializers.CharField(required=False, help_text="Sent as data: its type.")
    bytes = serializers.IntegerField(required=False, help_text="Sent as data: its size.")
    width = serializers.IntegerField(required=False, allow_null=True)
    height = serializers.IntegerField(required=False, allow_null=True)
    url = serializers.URLField(
        required=False, help_text="Sent as an https URL: the URL (toolchat never fetches it)."
    )
    detail = serializers.CharField(allow_null=True, help_text="`auto`, `low`, `high` or null.")


class MessageSerializer(serializers.Serializer[Any]):
    """One message: an OpenAI Chat Completions message plus toolchat's fields.

    Drop every key but `role`, `content`, `tool_calls` and `tool_call_id` and
    what remains is the exact message to send to an OpenAI-compatible API.
    """

    id = serializers.UUIDField()
    role = serializers.ChoiceField(choices=Role.choices)
    content = serializers.CharField(
        allow_null=True, help_text="Null only for an assistant message that calls tools."
    )
    tool_calls = ToolCallSerializer(many=True, required=False, help_text="Assistant only.")
    tool_call_id = serializers.CharField(required=False, help_text="Tool only: the call answered.")
    name = serializers.CharField(required=False, help_text="Tool only: the tool that answered.")
    tool_execution_id = serializers.UUIDField(
        required=False,
        allow_null=True,
        help_text="Tool only: the audit row of the call (GET /api/v1/tool-executions/).",
    )
    position = serializers.IntegerField(help_text="The order in the conversation, from 0.")
    created_at = serializers.DateTimeField()
    run_id = serializers.UUIDField(allow_null=True)
    resource_id = serializers.UUIDField(
        allow_null=True, help_text="The record the tool created or read (tool messages)."
    )
    latency_ms = serializers.IntegerField(
        allow_null=True, help_text="Assistant only: the model call's duration."
    )
    model = serializers.CharField(allow_null=True)
    usage = UsageSerializer(allow_null=True)
    finish_reason = serializers.CharField(allow_null=True)
    html = serializers.CharField(
        required=False,
        allow_null=True,
        help_text="Assistant only: `content` rendered from Markdown and sanitized (safe to insert).",
    )
    suggestions = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        allow_null=True,
        help_text="Final assistant answers: follow-up prompts to offer (from tools and the model).",
    )
    # Not read_only: the schema would then require it of every message (user ones too).
    reasoning = serializers.CharField(
        required=False,
        allow_null=True,
        help_text="Assistant only: what the model wrote before its answer (`reasoning_content` "
        "or `reasoning`), as plain text; null when it sent none. Never sent back to a model.",
    )
    resource = ResourceSummarySerializer(
        required=False,
        allow_null=True,
        help_text="With resource_id: the record's kind and title, for a card.",
    )
    images = MessageImageSerializer(
        many=True,
        required=False,
        help_text="User only, when it has any: the images it carries, after its text "
        "(sent to the model as `image_url` content parts).",
    )
    superseded_at = serializers.DateTimeField(
        required=False,
        help_text="With ?include_superseded=true: when a regenerated or edited turn replaced it.",
    )
    turn = TurnSerializer(
        required=False,
        help_text="User messages in the message list: the outcome of the turn they started.",
    )


def message_data(message: Message) -> dict[str, Any]:
    """A message as the API shows it (`message_to_api`, plus the audit row of a tool answer).

    In the message list, a user message also carries the outcome of the turn it
    started (`turn`), read in the list's own query.
    """
    data = message_to_api(message)
    if message.role == Role.USER and getattr(message, "run_status", None):
        data["turn"] = {
            "run_id": str(message.turn_run_id),  # type: ignore[attr-defined]
            "status": message.run_status,  # type: ignore[attr-defined]
            "error": message.run_error or None,  # type: ignore[attr-defined]
            "latency_ms": message.run_latency_ms,  # type: ignore[attr-defined]
            "model_calls": message.run_model_calls,  # type: ignore[attr-defined]
        }
    if message.role == Role.TOOL:
        execution_id = getattr(message, "tool_execution_id", None)
        data["tool_execution_id"] = str(execution_id) if execution_id else None
    return data


class RunSerializer(serializers.ModelSerializer[Run]):
    """A run: its state, timings, model calls and tool executions."""

    conversation_id = serializers.UUIDField(read_only=True)
    trigger_message_id = serializers.UUIDField(
        read_only=True, allow_null=True, help_text="The user message the run answers."
    )
    status = serializers.ChoiceField(choices=RunStatus.choices, read_only=True)
    mode = serializers.ChoiceField(choices=Mode.choices, read_only=True)
    model_steps = serializers.SerializerMethodField(
        help_text="The run's Steps as the audit pages count them: the distinct steps of its "
        "model calls, the answer's included (two for a two-pass run). `steps` counts only "
        "the steps that ran tools, what `max_steps` bounds."
    )
    usage = serializers.SerializerMethodField(help_text="Tokens summed over the model calls.")
    model_call_log = ModelCallSerializer(
        source="model_call_rows", many=True, read_only=True, help_text="Oldest first."
    )
    tool_executions = ToolExecutionSerializer(many=True, read_only=True, help_text="Oldest first.")
    client_options = serializers.JSONField(
        read_only=True,
        allow_null=True,
        help_text="A run of /v1/chat/completions: the request's options it honoured and kept "
        "(temperature, max_tokens, tool_choice, response_format, user, metadata, stream); "
        "null otherwise.",
    )
    client_tools = serializers.JSONField(
        read_only=True,
        allow_null=True,
        help_text="A run of /v1/chat/completions: the tools its client declared (their calls "
        "went back to the client); null otherwise.",
    )
    replay_of = serializers.UUIDField(
        source="replay_of_id",
        read_only=True,
        allow_null=True,
        help_text="A replay (POST /api/v1/runs/{id}/replay/): the run it replays; null otherwise.",
    )
    replay_tools = serializers.ChoiceField(
        choices=ReplayTools.choices,
        allow_blank=True,
        read_only=True,
        help_text="A replay's tools: `recorded` (served from the original's record) or `live`; "
        "empty for a run that is no replay.",
    )
    replay_mode = serializers.ChoiceField(
        choices=ReplayMode.choices,
        allow_blank=True,
        read_only=True,
        help_text="A replay's way: `free` or `forced` (teacher-forced); empty otherwise.",
    )

    class Meta:
        model = Run
        fields = [
            "id",
            "conversation_id",
            "trigger_message_id",
            "status",
            "mode",
            "steps",
            "model_steps",
            "model_calls",
            "error",
            "client_options",
            "client_tools",
            "replay_of",
            "replay_tools",
            "replay_mode",
            "created_at",
            "started_at",
            "finished_at",
            "latency_ms",
            "usage",
            "model_call_log",
            "tool_executions",
        ]
        read_only_fields = fields

    def get_model_steps(self, run: Run) -> int:
        """The distinct steps of the run's model calls (docs/audit.md)."""
        return model_steps(run.model_call_rows.all())

    @extend_schema_field(RunUsageSerializer)
    def get_usage(self, run: Run) -> dict[str, Any]:
        """Tokens and cost of all the run's model calls (null when none reported)."""
        return calls_usage(list(run.model_call_rows.all()))


class EventSerializer(serializers.Serializer[Any]):
    """One event envelope (the same on the WebSocket, in SSE and here)."""

    seq = serializers.IntegerField(help_text="Numbered per conversation, without gaps.")
    type = serializers.ChoiceField(choices=sorted(EVENT_TYPES))
    run_id = serializers.UUIDField()
    ts = serializers.DateTimeField()
    # A field called `data` hides Serializer.data for the type checker only: DRF's
    # metaclass moves declared fields off the class. It is the envelope's name.
    data = serializers.DictField(help_text="Depends on the type; see docs/api.md.")  # type: ignore[assignment]


class ErrorSerializer(serializers.Serializer[Any]):
    """Every error answer: a stable code, a readable message, the field at fault if any."""

    code = serializers.CharField(help_text="e.g. invalid, not_found, conflict, throttled.")
    message = serializers.CharField()
    field = serializers.CharField(
        required=False, help_text="The body field or query parameter at fault."
    )
    details = serializers.DictField(
        required=False,
        help_text="More: every field error (`errors`), the active `run_id` of a 409, `retry_after`.",
    )
