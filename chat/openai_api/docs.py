"""The OpenAI-compatible operations in the schema: Bearer auth, OpenAI's error object, examples."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, inline_serializer
from rest_framework import serializers

ERROR = inline_serializer(
    "OpenAIError",
    {
        "error": inline_serializer(
            "OpenAIErrorObject",
            {
                "message": serializers.CharField(),
                "type": serializers.CharField(help_text="invalid_request_error, ..."),
                "param": serializers.CharField(allow_null=True),
                "code": serializers.CharField(allow_null=True),
            },
        )
    },
)

ERROR_TEXT = {
    400: "A malformed body or history; `param` names the field at fault.",
    401: "No or bad token (`Authorization: Bearer <toolchat API token>`).",
    404: "`model_not_found`: the model is not one GET /v1/models lists.",
    409: "The conversation's last run still waits (for an approval, say).",
    429: "Too many messages (the REST API's budget); `Retry-After` says when to retry.",
    502: "`run_failed`: the turn failed; `message` says why.",
}

ERROR_EXAMPLES: dict[int, tuple[str, str, str | None, str | None]] = {
    400: ("messages[0].role must be ...", "invalid_request_error", "messages[0].role", "invalid"),
    401: ("Invalid token.", "authentication_error", None, "invalid_api_key"),
    404: ("The model 'x' does not exist ...", "not_found_error", "model", "model_not_found"),
    409: ("A run of this conversation is still in progress ...", "conflict_error", None, None),
    429: ("Request was throttled.", "rate_limit_error", None, "throttled"),
    502: ("The model call failed (HTTP 400) ...", "server_error", None, "run_failed"),
}


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    """Schema responses for these error statuses (401 always), in OpenAI's shape."""
    responses = {}
    for code in sorted({401, *codes}):
        message, kind, param, reason = ERROR_EXAMPLES[code]
        value = {"error": {"message": message, "type": kind, "param": param, "code": reason}}
        responses[code] = OpenApiResponse(
            ERROR,
            description=ERROR_TEXT[code],
            examples=[OpenApiExample(f"Error {code}", value, status_codes=[code])],
        )
    return responses


def example(name: str, value: Any, *, request: bool = False) -> OpenApiExample:
    if request:
        return OpenApiExample(name, value, request_only=True)
    return OpenApiExample(name, value, response_only=True, status_codes=[200])


MODEL = {"id": "openai/gpt-4.1-mini", "object": "model", "created": 0, "owned_by": "openai"}

REQUEST = {
    "model": "openai/gpt-4.1-mini",
    "messages": [{"role": "user", "content": "What is 12*7?"}],
}

COMPLETION = {
    "id": "chatcmpl-0f8fad5bd9cb469fa16570867728950e",
    "object": "chat.completion",
    "created": 1764151200,
    "model": "openai/gpt-4.1-mini",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "12 times 7 is 84.", "refusal": None},
            "finish_reason": "stop",
            "logprobs": None,
        }
    ],
    "usage": {"prompt_tokens": 310, "completion_tokens": 24, "total_tokens": 334},
}

RESPONSE_REQUEST = {"model": "openai/gpt-4.1-mini", "input": "What is 12*7?"}

RESPONSE = {
    "id": "resp_0f8fad5bd9cb469fa16570867728950e",
    "object": "response",
    "created_at": 1764151200,
    "completed_at": 1764151202,
    "status": "completed",
    "model": "openai/gpt-4.1-mini",
    "output": [
        {
            "type": "mcp_call",
            "id": "mcp_6a240182ddcf44d2b01507831f301832",
            "server_label": "toolchat",
            "name": "calculator",
            "arguments": '{"expression": "12*7"}',
            "output": '{"success": true, "result": 84}',
            "error": None,
            "status": "completed",
            "approval_request_id": None,
        },
        {
            "type": "message",
            "id": "msg_7b1e4c0b5c2e4c1f9f3f0c6f1e2d3a4b",
            "status": "completed",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "12*7 is 84.", "annotations": [], "logprobs": []}
            ],
        },
    ],
    "usage": {
        "input_tokens": 310,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 24,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 334,
    },
    "error": None,
    "incomplete_details": None,
    "previous_response_id": None,
    "store": True,
}

RESPONSE_DELETED = {"id": RESPONSE["id"], "object": "response.deleted", "deleted": True}

RESPONSE_CANCELLED = {**RESPONSE, "status": "cancelled", "output": []}

INPUT_ITEM = {
    "id": "msg_0",
    "type": "message",
    "role": "user",
    "content": [{"type": "input_text", "text": "What is 12*7?"}],
}

INPUT_ITEMS = {
    "object": "list",
    "data": [INPUT_ITEM],
    "first_id": "msg_0",
    "last_id": "msg_0",
    "has_more": False,
}

CONVERSATION = {
    "id": "conv_0f8fad5bd9cb469fa16570867728950e",
    "object": "conversation",
    "created_at": 1764151200,
    "metadata": {"topic": "orders"},
}

CONVERSATION_REQUEST = {
    "items": [{"type": "message", "role": "user", "content": "Hello!"}],
    "metadata": {"topic": "orders"},
}

CONVERSATION_DELETED = {"id": CONVERSATION["id"], "object": "conversation.deleted", "deleted": True}

ITEMS_REQUEST = {"items": [{"type": "message", "role": "user", "content": "And order A-2?"}]}


class BearerAuthenticationScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """The REST API's tokens as `Authorization: Bearer <key>`."""

    target_class = "chat.openai_api.views.BearerAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        """An HTTP bearer scheme."""
        return {"type": "http", "scheme": "bearer"}
