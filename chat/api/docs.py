"""The schema's shared pieces: error answers, path parameters and examples.

Kept apart from the views so that a view reads as what it does; the examples
are the shapes the tests check, written out once.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse

from chat.api.serializers import ErrorSerializer

ERROR_TEXT = {
    400: "Bad input: `field` names the body field or query parameter at fault.",
    401: "No or bad credentials (`Authorization: Token <key>`, or a session).",
    403: "Session authentication without a valid CSRF token.",
    404: "No such object, or it is not yours (the two are not told apart).",
    409: "Conflicts with the current state; `details.run_id` names the active run.",
    415: "The body is not `application/json`.",
    429: "Too many messages; `details.retry_after` (and `Retry-After`) say when to retry.",
}

ERROR_EXAMPLES = {
    400: {
        "code": "invalid",
        "message": "max_steps: Ensure this value is less than or equal to 50.",
        "field": "max_steps",
        "details": {"errors": {"max_steps": ["Ensure this value is less than or equal to 50."]}},
    },
    401: {"code": "not_authenticated", "message": "Authentication credentials were not provided."},
    403: {"code": "permission_denied", "message": "CSRF Failed: CSRF token missing."},
    404: {"code": "not_found", "message": "Conversation not found."},
    409: {
        "code": "conflict",
        "message": "A run of this conversation is still in progress; wait for it or cancel it.",
        "details": {"run_id": "0f8fad5b-d9cb-469f-a165-70867728950e", "status": "running"},
    },
    415: {
        "code": "unsupported_media_type",
        "message": 'Unsupported media type "text/plain" in request.',
    },
    429: {
        "code": "throttled",
        "message": "Request was throttled. Expected available in 12 seconds.",
        "details": {"retry_after": 12},
    },
}


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    """Schema responses for these error statuses, 401 always included."""
    return {
        code: OpenApiResponse(
            ErrorSerializer,
            description=ERROR_TEXT[code],
            examples=[OpenApiExample(f"Error {code}", ERROR_EXAMPLES[code], status_codes=[code])],
        )
        for code in sorted({401, *codes})
    }


def path_id(name: str, what: str) -> OpenApiParameter:
    """A UUID path parameter."""
    return OpenApiParameter(name, OpenApiTypes.UUID, OpenApiParameter.PATH, description=what)


def path_int(name: str, what: str) -> OpenApiParameter:
    """An integer path parameter (a rule's or a standing approval's id)."""
    return OpenApiParameter(name, OpenApiTypes.INT, OpenApiParameter.PATH, description=what)


def example(name: str, value: Any, *, request: bool = False, status: int = 200) -> OpenApiExample:
    """A request or response example."""
    if request:
        return OpenApiExample(name, value, request_only=True)
    return OpenApiExample(name, value, response_only=True, status_codes=[status])


CONVERSATION_ID = "3f2b8c1e-7a4d-4c2e-9b1a-5d6e7f809a1b"
RUN_ID = "0f8fad5b-d9cb-469f-a165-70867728950e"
CALL_ID = "call_Yx3mE0pL2kQ9"

CONVERSATION = {
    "id": CONVERSATION_ID,
    "title": "Kitchen maths",
    "mode": "two_pass",
    "max_steps": 5,
    "model": "",
    "system_prompt": "Answer in one sentence.",
    "active_run_id": None,
    "last_event_seq": 14,
    "replay_of": None,
    "source": "chat",
    "created_at": "2025-05-01T09:30:00.120000Z",
    "updated_at": "2025-05-01T09:31:02.410000Z",
}

_BASE_MESSAGE = {
    "run_id": RUN_ID,
    "resource_id": None,
    "latency_ms": None,
    "model": None,
    "usage": None,
    "finish_reason": None,
}
USER_MESSAGE = {
    "id": "6d1c3b0a-58e4-4b8f-9a7e-2c4d5e6f7a80",
    "role": "user",
    "content": "What is 12*7?",
    "position": 0,
    "created_at": "2025-05-01T09:31:00.010000Z",
    **_BASE_MESSAGE,
}
TOOL_CALL_MESSAGE = {
    "id": "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d",
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": CALL_ID,
            "type": "function",
            "function": {"name": "calculator", "arguments": '{"expression": "12*7"}'},
        }
    ],
    "position": 1,
    "created_at": "2025-05-01T09:31:00.640000Z",
    **_BASE_MESSAGE,
    "latency_ms": 612,
    "model": "gpt-4o-mini",
    "usage": {"prompt_tokens": 412, "completion_tokens": 18},
    "finish_reason": "tool_calls",
}
TOOL_MESSAGE = {
    "id": "1b2c3d4e-5f60-4718-8293-a4b5c6d7e8f9",
    "role": "tool",
    "tool_call_id": CALL_ID,
    "content": '{"success": true, "expression": "12*7", "result": 84}',
    "name": "calculator",
    "tool_execution_id": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
    "position": 2,
    "created_at": "2025-05-01T09:31:00.700000Z",
    **_BASE_MESSAGE,
}
ANSWER_MESSAGE = {
    "id": "2c3d4e5f-6071-4829-93a4-b5c6d7e8f9a0",
    "role": "assistant",
    "content": "12 times 7 is 84.",
    "position": 3,
    "created_at": "2025-05-01T09:31:01.300000Z",
    **_BASE_MESSAGE,
    "latency_ms": 540,
    "model": "gpt-4o-mini",
    "usage": {"prompt_tokens": 455, "completion_tokens": 9},
    "finish_reason": "stop",
}

TOOL_EXECUTION = {
    "id": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
    "run_id": RUN_ID,
    "conversation_id": CONVERSATION_ID,
    "message_id": TOOL_CALL_MESSAGE["id"],
    "step": 1,
    "tool_call_id": CALL_ID,
    "name": "calculator",
    "arguments": {"expression": "12*7"},
    "arguments_raw": "",
    "status": "succeeded",
    "approved_by_id": None,
    "decided_at": None,
    "decision_reason": "",
    "result": {"success": True, "expression": "12*7", "result": 84},
    "content": '{"success": true, "expression": "12*7", "result": 84}',
    "result_chars": 54,
    "truncated": False,
    "error": "",
    "created_at": "2025-05-01T09:31:00.650000Z",
    "started_at": "2025-05-01T09:31:00.660000Z",
    "finished_at": "2025-05-01T09:31:00.690000Z",
    "duration_ms": 30,
    "attempts": 1,
    "replayed_from": None,
    "policy": {"decision": "allow", "rule": None},
    "approved_arguments": None,
    "standing_approval": None,
}

TOOL_POLICY = {
    "id": 3,
    "tools": ["delete_*", "tracker__*"],
    "users": [],
    "groups": ["ops"],
    "decision": "ask",
    "note": "Deletions and the tracker need a person's yes.",
    "created_at": "2025-05-01T09:00:00Z",
    "updated_at": "2025-05-01T09:00:00Z",
}

BUDGET_LIMIT = {
    "id": 2,
    "users": [],
    "groups": ["interns"],
    "period": "day",
    "tokens": 200000,
    "cost_usd": 5.0,
    "model_calls": None,
    "tool_calls": None,
    "seconds": None,
    "hard": True,
    "note": "Interns: 200k tokens or $5 a day.",
    "created_at": "2025-05-01T09:00:00Z",
    "updated_at": "2025-05-01T09:00:00Z",
}

USAGE = {
    "period": "day",
    "since": "2025-05-01T00:00:00Z",
    "resets_at": "2025-05-02T00:00:00Z",
    "tokens": 18240,
    "cost_usd": 0.0241,
    "reserved": {"tokens": 4000, "cost_usd": 0.0024},
    "by_model": [
        {
            "model": "gpt-4o-mini",
            "provider": "openai",
            "calls": 12,
            "prompt_tokens": 15100,
            "completion_tokens": 3140,
            "tokens": 18240,
            "cost_usd": 0.0241,
        }
    ],
    "by_day": [{"day": "2025-05-01", "tokens": 18240, "cost_usd": 0.0241}],
    "limits": [
        {
            "id": 2,
            "period": "day",
            "tokens": 200000,
            "cost_usd": 5.0,
            "used_tokens": 22240,
            "used_cost_usd": 0.0265,
            "resets_at": "2025-05-02T00:00:00Z",
            "hard": True,
            "note": "Interns: 200k tokens or $5 a day.",
        }
    ],
}

APPROVAL_EXECUTION = {
    **TOOL_EXECUTION,
    "name": "delete_notes",
    "arguments": {"note_ids": ["3f2a…", "9b1c…"]},
    "approved_by_id": 1,
    "decided_at": "2025-05-01T09:33:10.000000Z",
    "decision_reason": "Go ahead.",
    "result": None,
    "content": "",
    "result_chars": 0,
    "started_at": None,
    "finished_at": None,
    "duration_ms": None,
    "attempts": 0,
}

REJECTED_EXECUTION = {
    **APPROVAL_EXECUTION,
    "status": "rejected",
    "decision_reason": "Not this one.",
    "content": '{"success": false, "error": "The call to delete_notes was rejected by the user: '
    'Not this one. It did not run."}',
    "finished_at": "2025-05-01T09:33:10.010000Z",
}

RUN = {
    "id": RUN_ID,
    "conversation_id": CONVERSATION_ID,
    "trigger_message_id": USER_MESSAGE["id"],
    "status": "completed",
    "mode": "two_pass",
    "steps": 1,
    "model_steps": 2,
    "model_calls": 2,
    "error": "",
    "replay_of": None,
    "replay_tools": "",
    "replay_mode": "",
    "created_at": "2025-05-01T09:31:00.010000Z",
    "started_at": "2025-05-01T09:31:00.020000Z",
    "finished_at": "2025-05-01T09:31:01.310000Z",
    "latency_ms": 1300,
    "usage": {"prompt_tokens": 867, "completion_tokens": 27},
    "model_call_log": [
        {
            "id": "4e5f6071-8293-4a4b-b5c6-d7e8f9a0b1c2",
            "step": 1,
            "purpose": "tools",
            "model": "gpt-4o-mini",
            "provider": "openai",
            "status": "succeeded",
            "error": "",
            "finish_reason": "tool_calls",
            "message_count": 2,
            "request_hash": "5f1d0c0b6f3f2e0c9d8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e",
            "tools_offered": ["calculator", "get_current_time", "record_note"],
            "response_message_id": TOOL_CALL_MESSAGE["id"],
            "started_at": "2025-05-01T09:31:00.030000Z",
            "first_token_ms": 420,
            "latency_ms": 612,
            "prompt_tokens": 412,
            "completion_tokens": 18,
            "attempts": 1,
            "forced_answer": None,
        }
    ],
    "tool_executions": [TOOL_EXECUTION],
}
QUEUED_RUN = {
    **RUN,
    "status": "queued",
    "steps": 0,
    "model_steps": 0,
    "model_calls": 0,
    "started_at": None,
    "finished_at": None,
    "latency_ms": None,
    "usage": {"prompt_tokens": None, "completion_tokens": None},
    "model_call_log": [],
    "tool_executions": [],
}

EVENT = {
    "seq": 12,
    "type": "tool_call.completed",
    "run_id": RUN_ID,
    "ts": "2025-05-01T09:31:00.700000Z",
    "data": {
        "execution_id": TOOL_EXECUTION["id"],
        "tool_call_id": CALL_ID,
        "name": "calculator",
        "status": "succeeded",
        "duration_ms": 30,
        "truncated": False,
    },
}

SSE_EXAMPLE = (
    ": connected\n\n"
    "id: 9\nevent: run.started\n"
    f'data: {{"seq":9,"type":"run.started","run_id":"{RUN_ID}",'
    '"ts":"2025-05-01T09:31:00.020000Z","data":{"mode":"two_pass"}}\n\n'
)
