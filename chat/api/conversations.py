"""Conversations: list, create, read, change, delete, and export as fine-tuning JSONL."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.api import docs
from chat.api.base import (
    CursorPage,
    page_serializer,
    paginate,
)
from chat.api.renderers import JSONRenderer
from chat.api.serializers import ConversationSerializer
from chat.export import conversation_export
from chat.inputs import StrictInputSerializer, StrictIntegerField, TextField
from chat.models import MAX_STEPS_LIMIT, Conversation, Mode, Source
from chat.selectors import (
    conversation_detail,
    conversation_get,
    conversation_list,
)
from chat.services.conversations import (
    DEFAULT_MAX_STEPS,
    MODEL_MAX_LENGTH,
    TITLE_MAX_LENGTH,
    conversation_create,
    conversation_delete,
    conversation_update,
)

TAG = ["conversations"]


def _output(conversation: Conversation) -> dict[str, Any]:
    return ConversationSerializer(conversation).data


class ConversationListApi(APIView):
    """The user's conversations, the most recently active first."""

    class Pagination(CursorPage):
        ordering = ("-updated_at", "-id")

    class QuerySerializer(serializers.Serializer[Any]):
        q = TextField(
            required=False,
            allow_blank=True,
            max_length=200,
            help_text="Only conversations whose title or messages contain this text.",
        )
        # A field named `source` shadows Field.source only for the type checker: DRF's
        # metaclass takes declared fields off the class.
        source = serializers.MultipleChoiceField(  # type: ignore[assignment]
            choices=[c for c in Source.choices if c[0] != Source.TASK],
            required=False,
            help_text="Only conversations from these sources (`chat`, `api`, `v1`), "
            "comma-separated; all of them when left out.",
        )

        def to_internal_value(self, data: Any) -> Any:
            data = {key: data[key] for key in data}
            if isinstance(data.get("source"), str):
                data["source"] = [part for part in data["source"].split(",") if part]
            return super().to_internal_value(data)

    @extend_schema(
        tags=TAG,
        operation_id="conversations_list",
        summary="List your conversations",
        description=(
            "The most recently active first (`updated_at`: a message posted, a setting "
            "changed), 50 per page. `q` searches titles and the text of user and assistant "
            "messages."
        ),
        parameters=[QuerySerializer],
        responses={
            200: page_serializer("ConversationPageSerializer", ConversationSerializer),
            **docs.errors(400),
        },
        examples=[
            docs.example("A page", {"next": None, "previous": None, "results": [docs.CONVERSATION]})
        ],
    )
    def get(self, request: Request) -> Response:
        """One page of the user's conversations."""
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return paginate(
            self.Pagination(),
            conversation_list(
                user=request.user,
                search=query.validated_data.get("q", "").strip(),
                sources=query.validated_data.get("source") or None,
            ),
            request,
            self,
            lambda page: ConversationSerializer(page, many=True).data,
        )


class ConversationCreateApi(APIView):
    """Start a conversation."""

    class InputSerializer(StrictInputSerializer):
        title = TextField(required=False, allow_blank=True, max_length=TITLE_MAX_LENGTH)
        mode = serializers.ChoiceField(
            choices=Mode.choices,
            required=False,
            help_text="What follows the tools: two_pass (default), loop, direct or llm.",
        )
        max_steps = StrictIntegerField(
            required=False,
            min_value=1,
            max_value=MAX_STEPS_LIMIT,
            help_text=f"Bound of the loop mode (default {DEFAULT_MAX_STEPS}).",
        )
        system_prompt = TextField(
            required=False,
            allow_blank=True,
            trim_whitespace=False,
            help_text="Told to the model first in every call of this conversation's runs; blank "
            "(the default): the server's default prompt (TOOLCHAT_SYSTEM_PROMPT). At most "
            "MAX_SYSTEM_PROMPT_CHARS (default 8,000) characters, no NUL. A change applies from "
            "the next run.",
        )
        model = TextField(
            required=False,
            allow_blank=True,
            max_length=MODEL_MAX_LENGTH,
            help_text="The model this conversation talks to, an `id` of GET /api/v1/models/ "
            "(`<provider>/<model>`); empty: the server's default (LLM_MODEL).",
        )

    @extend_schema(
        tags=TAG,
        operation_id="conversations_create",
        summary="Create a conversation",
        request=InputSerializer,
        responses={201: ConversationSerializer, **docs.errors(400, 403, 415)},
        examples=[
            docs.example(
                "Create",
                {"title": "Kitchen maths", "mode": "two_pass", "system_prompt": "Be brief."},
                request=True,
            ),
            docs.example("Created", docs.CONVERSATION, status=201),
        ],
    )
    def post(self, request: Request) -> Response:
        """Create a conversation owned by the user."""
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        # With the session: the chat page's; with a token: another client's.
        source = Source.CHAT if request.auth is None else Source.API
        conversation = conversation_create(
            owner=request.user,  # type: ignore[arg-type]
            source=source,
            **serializer.validated_data,
        )
        conversation.active_run_id = None  # type: ignore[attr-defined]
        return Response(_output(conversation), status=status.HTTP_201_CREATED)


class ConversationDetailApi(APIView):
    """One of the user's conversations."""

    @extend_schema(
        tags=TAG,
        operation_id="conversations_retrieve",
        summary="Read a conversation",
        parameters=[docs.path_id("conversation_id", "The conversation.")],
        responses={200: ConversationSerializer, **docs.errors(404)},
        examples=[docs.example("A conversation", docs.CONVERSATION)],
    )
    def get(self, request: Request, conversation_id: uuid.UUID) -> Response:
        """The conversation, or 404."""
        return Response(
            _output(conversation_detail(conversation_id=conversation_id, user=request.user))
        )


class ConversationUpdateApi(APIView):
    """Change a conversation's title or settings."""

    class InputSerializer(ConversationCreateApi.InputSerializer):
        pass

    @extend_schema(
        tags=TAG,
        operation_id="conversations_partial_update",
        summary="Change a conversation",
        description="Only the fields sent change. The new mode applies from the next message.",
        parameters=[docs.path_id("conversation_id", "The conversation.")],
        request=InputSerializer,
        responses={200: ConversationSerializer, **docs.errors(400, 403, 404, 415)},
        examples=[
            docs.example("Rename and loop", {"title": "Maths", "mode": "loop"}, request=True),
            docs.example("Changed", {**docs.CONVERSATION, "title": "Maths", "mode": "loop"}),
        ],
    )
    def patch(self, request: Request, conversation_id: uuid.UUID) -> Response:
        """Apply the fields sent; nothing changes if one of them is bad."""
        conversation = conversation_detail(conversation_id=conversation_id, user=request.user)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        conversation = conversation_update(conversation=conversation, **serializer.validated_data)
        return Response(_output(conversation))


class ConversationDeleteApi(APIView):
    """Delete a conversation with its messages, runs, events and audit rows."""

    @extend_schema(
        tags=TAG,
        operation_id="conversations_destroy",
        summary="Delete a conversation",
        description=(
            "Deletes its messages, runs, events and tool executions. Resources that tools "
            "created stay yours. Refused with 409 while a run is active: cancel it first."
        ),
        parameters=[docs.path_id("conversation_id", "The conversation.")],
        responses={204: OpenApiResponse(description="Deleted."), **docs.errors(403, 404, 409)},
    )
    def delete(self, request: Request, conversation_id: uuid.UUID) -> Response:
        """Delete it, or 409 while a run is active."""
        conversation = conversation_get(conversation_id=conversation_id, user=request.user)
        conversation_delete(conversation=conversation)
        return Response(status=status.HTTP_204_NO_CONTENT)


class JsonLinesRenderer(BaseRenderer):
    """JSON Lines: one JSON document per line (what OpenAI's fine-tuning takes)."""

    media_type = "application/jsonl"
    format = "jsonl"
    charset = "utf-8"

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Any = None,
    ) -> bytes:
        """Each item of a list as one line; anything else (an error) as a single line."""
        items = data if isinstance(data, list) else [data]
        return "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items).encode()


class ConversationExportApi(APIView):
    """The conversation as OpenAI fine-tuning examples (JSON Lines)."""

    renderer_classes = [JSONRenderer, JsonLinesRenderer]

    class QuerySerializer(serializers.Serializer[Any]):
        per = serializers.ChoiceField(
            choices=["conversation", "run"],
            default="conversation",
            help_text="One line for the conversation, or one per completed run.",
        )
        include_reasoning = serializers.BooleanField(
            default=False,
            help_text="Give assistant messages the model's reasoning, as `reasoning`, where it "
            "sent one (not a field of OpenAI's format: a trainer that wants it reads it).",
        )

    @extend_schema(
        tags=TAG,
        operation_id="conversations_export",
        summary="Export as fine-tuning JSONL",
        description=(
            "JSON Lines in OpenAI's fine-tuning chat format: each line is "
            '`{"messages": [...], "tools": [...]}` with the system prompt, the user and '
            "assistant messages, the assistant `tool_calls` and the `tool` answers, and the "
            "tools that were offered. With `per=run`, one line per completed run holding the "
            "history up to the end of that run. Runs still in progress are left out. The "
            "model's reasoning is left out unless `include_reasoning=true`."
        ),
        parameters=[docs.path_id("conversation_id", "The conversation."), QuerySerializer],
        responses={
            (200, "application/jsonl"): OpenApiResponse(
                OpenApiTypes.STR, description="One JSON object per line."
            ),
            **docs.errors(400, 404),
        },
    )
    def get(self, request: Request, conversation_id: uuid.UUID) -> HttpResponse:
        """The JSONL file, as an attachment."""
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        conversation = conversation_get(conversation_id=conversation_id, user=request.user)
        lines = conversation_export(
            conversation=conversation,
            per_run=query.validated_data["per"] == "run",
            include_reasoning=query.validated_data["include_reasoning"],
        )
        response = HttpResponse(
            JsonLinesRenderer().render(lines), content_type="application/jsonl; charset=utf-8"
        )
        response["Content-Disposition"] = (
            f'attachment; filename="conversation-{conversation.pk}.jsonl"'
        )
        return response
