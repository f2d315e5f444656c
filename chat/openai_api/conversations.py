"""The Conversations API: /v1/conversations, and its items, over toolchat's stored conversations.

`POST /v1/conversations` makes a conversation (source `v1`), with the client's
items as its past and its `metadata`; `GET`, `POST` (its metadata) and
`DELETE /v1/conversations/{id}`; `GET /v1/conversations/{id}/items` lists its
messages as items (paged as OpenAI's lists are), `POST` adds items, and `GET
.../items/{item_id}` reads one (chat/openai_api/conversation_items.py). A
response created with `conversation` is that conversation's next turn
(chat/openai_api/responses.py). Another user's conversation is a 404; errors
are OpenAI's error object, and nothing is stored for a refused request.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from chat.exceptions import InvalidInput
from chat.models import Mode, Source
from chat.openai_api import docs
from chat.openai_api.conversation_items import (
    conversation_item,
    conversation_items,
    conversation_of,
    conversation_resource,
    items_as_history,
    items_of_messages,
    v1_id,
)
from chat.openai_api.response_items import input_items_page
from chat.openai_api.response_options import metadata_check
from chat.openai_api.turns import conversation_title
from chat.openai_api.views import TAG, OpenAIView
from chat.services.client_turns import client_history_add
from chat.services.conversations import (
    conversation_create,
    conversation_delete,
    conversation_metadata_set,
)

ID_PARAMETER = OpenApiParameter(
    "conversation_id",
    str,
    OpenApiParameter.PATH,
    description="The conversation's id (`conv_...`, or its toolchat id).",
)
ITEM_PARAMETER = OpenApiParameter(
    "item_id", str, OpenApiParameter.PATH, description="The item's id."
)
LIST_PARAMETERS = [
    OpenApiParameter("order", str, description="`desc` (newest first, the default) or `asc`."),
    OpenApiParameter("after", str, description="The id of the item to list after."),
    OpenApiParameter("limit", int, description="1 to 100 (20 by default)."),
]


class ConversationCreateView(OpenAIView):
    """A new conversation, with the client's items as its past."""

    @extend_schema(
        tags=TAG,
        operation_id="openai_conversations_create",
        summary="Create a conversation (Conversations API)",
        description=(
            "A toolchat conversation (source `v1`), with `items` (at most 20: messages, "
            "function calls with their outputs) as its past and `metadata`. A response "
            "created with `conversation` is its next turn. docs/openai-api.md."
        ),
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT, **docs.errors(400)},
        examples=[
            docs.example("Items and metadata", docs.CONVERSATION_REQUEST, request=True),
            docs.example("The conversation", docs.CONVERSATION),
        ],
    )
    def post(self, request: Request) -> Response:
        """The conversation made, its items stored."""
        body = _body(request.data)
        metadata = _metadata(body)
        raw = body.get("items")
        history = items_as_history(raw) if raw not in (None, []) else []
        first = next((m.get("content") for m in history if m["role"] == "user"), "") or ""
        owner: Any = request.user  # authenticated: a User
        with transaction.atomic():
            conversation = conversation_create(
                owner=owner,
                title=conversation_title(first),
                mode=Mode.LOOP,
                source=Source.V1,
            )
            conversation_metadata_set(conversation=conversation, metadata=metadata)
            if history:
                client_history_add(conversation=conversation, history=history)
        return Response(conversation_resource(conversation))


class ConversationDetailView(OpenAIView):
    """One of the user's conversations."""

    @extend_schema(
        tags=TAG,
        operation_id="openai_conversations_retrieve",
        summary="Retrieve a conversation (Conversations API)",
        parameters=[ID_PARAMETER],
        responses={200: OpenApiTypes.OBJECT, **docs.errors(404)},
        examples=[docs.example("The conversation", docs.CONVERSATION)],
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        """The conversation; another user's is a 404."""
        return Response(conversation_resource(conversation_of(request.user, conversation_id)))

    @extend_schema(
        tags=TAG,
        operation_id="openai_conversations_update",
        summary="Update a conversation's metadata (Conversations API)",
        parameters=[ID_PARAMETER],
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT, **docs.errors(400, 404)},
        examples=[
            docs.example("New metadata", {"metadata": {"topic": "orders"}}, request=True),
            docs.example("The conversation", docs.CONVERSATION),
        ],
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        """Its `metadata` replaced (required, as OpenAI's is)."""
        conversation = conversation_of(request.user, conversation_id)
        body = _body(request.data)
        if "metadata" not in body:
            raise InvalidInput("metadata is required.", field="metadata")
        conversation_metadata_set(conversation=conversation, metadata=_metadata(body))
        return Response(conversation_resource(conversation))

    @extend_schema(
        tags=TAG,
        operation_id="openai_conversations_delete",
        summary="Delete a conversation (Conversations API)",
        parameters=[ID_PARAMETER],
        responses={200: OpenApiTypes.OBJECT, **docs.errors(404, 409)},
        examples=[docs.example("Deleted", docs.CONVERSATION_DELETED)],
    )
    def delete(self, request: Request, conversation_id: str) -> Response:
        """The conversation and its record deleted, as the REST API's delete does."""
        conversation = conversation_of(request.user, conversation_id)
        shown = v1_id(conversation)
        conversation_delete(conversation=conversation)
        return Response({"id": shown, "object": "conversation.deleted", "deleted": True})


class ConversationItemsView(OpenAIView):
    """A conversation's items: listed, and added to."""

    @extend_schema(
        tags=TAG,
        operation_id="openai_conversations_items_list",
        summary="List a conversation's items (Conversations API)",
        parameters=[ID_PARAMETER, *LIST_PARAMETERS],
        responses={200: OpenApiTypes.OBJECT, **docs.errors(400, 404)},
        examples=[docs.example("The items", docs.INPUT_ITEMS)],
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        """A page of its messages as items."""
        conversation = conversation_of(request.user, conversation_id)
        page = input_items_page(
            conversation_items(conversation), request.query_params, of="this conversation"
        )
        return Response(page)

    @extend_schema(
        tags=TAG,
        operation_id="openai_conversations_items_create",
        summary="Add items to a conversation (Conversations API)",
        parameters=[ID_PARAMETER],
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT, **docs.errors(400, 404, 409)},
        examples=[
            docs.example("An item", docs.ITEMS_REQUEST, request=True),
            docs.example("The items added", docs.INPUT_ITEMS),
        ],
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        """The items stored after its last message; the items added, as a list."""
        conversation = conversation_of(request.user, conversation_id)
        history = items_as_history(_body(request.data).get("items"))
        added = client_history_add(conversation=conversation, history=history)
        data = items_of_messages(conversation, added)
        return Response(
            {
                "object": "list",
                "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": False,
            }
        )


class ConversationItemView(OpenAIView):
    """One item of a conversation."""

    @extend_schema(
        tags=TAG,
        operation_id="openai_conversations_items_retrieve",
        summary="Retrieve a conversation's item (Conversations API)",
        parameters=[ID_PARAMETER, ITEM_PARAMETER],
        responses={200: OpenApiTypes.OBJECT, **docs.errors(404)},
        examples=[docs.example("The item", docs.INPUT_ITEM)],
    )
    def get(self, request: Request, conversation_id: str, item_id: str) -> Response:
        """The item; one of another user's conversation is a 404."""
        conversation = conversation_of(request.user, conversation_id)
        return Response(conversation_item(conversation, item_id))


def _body(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InvalidInput("The body must be a JSON object.")
    return data


def _metadata(body: dict[str, Any]) -> dict[str, str]:
    metadata = body.get("metadata")
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise InvalidInput("metadata must be an object.", field="metadata")
    metadata_check(metadata)
    return metadata
