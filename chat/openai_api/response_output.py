"""A run as the Responses API's `response` resource (the Open Responses specification).

The resource is read from the run as stored, whenever it is asked for (the
create, its stream's last event, `GET /v1/responses/{id}`), so that all three
agree. Its `output` follows the run's assistant messages in order:

- an answer's text is a `message` item with one `output_text` part;
- a call of one of toolchat's own tools, which it ran on the server, is an
  `mcp_call` item of the server `toolchat`, with the tool's `output` (or its
  `error`) and a status: the item that OpenAI's clients (the openai SDK, the
  agents SDK, pydantic-ai) read as a call that ran on the server and do not
  try to run themselves, as they would a `function_call`;
- a call of one of the client's own tools is a `function_call` item, which
  the client answers with a `function_call_output` in its next request.

`id` is `resp_` and the run's id; a run is a stored response while
`Run.response` holds the request's echoed fields (`store: false` leaves it
empty, `DELETE` empties it; the turn stays in its conversation and audit).
"""

from __future__ import annotations

import uuid
from typing import Any

from chat.engine.request import client_tool_names
from chat.exceptions import NotFound
from chat.models import ExecutionStatus, Message, Role, Run, RunStatus, ToolExecution
from chat.openai_api.answers import approval_text, run_usage

SERVER_LABEL = "toolchat"
STATUSES = {
    RunStatus.QUEUED: "queued",
    RunStatus.RUNNING: "in_progress",
    RunStatus.AWAITING_APPROVAL: "in_progress",
    RunStatus.COMPLETED: "completed",
    RunStatus.FAILED: "failed",
    RunStatus.CANCELLED: "cancelled",
}
# A call that ended without its result (failed, timed out, rejected, ...) is `failed`; one
# still under way (or waiting for its approval) is `calling`.
CALL_STATUSES = {
    ExecutionStatus.SUCCEEDED: "completed",
    ExecutionStatus.FAILED: "failed",
    ExecutionStatus.TIMED_OUT: "failed",
    ExecutionStatus.REJECTED: "failed",
    ExecutionStatus.INTERRUPTED: "failed",
    ExecutionStatus.CANCELLED: "failed",
}
# Fields of the resource at the specification's defaults, where the request said nothing.
FIXED = {
    "truncation": "disabled",
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "top_logprobs": 0,
    "reasoning": None,
    "max_tool_calls": None,
    "background": False,
    "service_tier": "default",
    "safety_identifier": None,
    "prompt_cache_key": None,
}


class ResponseNotFound(NotFound):
    """No stored response of the user's with that id (404, as another user's is)."""


def response_id(run: Run) -> str:
    return f"resp_{run.pk.hex}"


def response_run(user: Any, value: str, *, field: str | None = None) -> Run:
    """The user's stored response with this id, or ResponseNotFound."""
    run_id: uuid.UUID | None = None
    if value.startswith("resp_"):
        try:
            run_id = uuid.UUID(hex=value.removeprefix("resp_"))
        except ValueError:
            run_id = None
    run = (
        Run.objects.select_related("conversation")
        .filter(pk=run_id, conversation__owner=user, response__isnull=False)
        .first()
        if run_id
        else None
    )
    if run is None:
        raise ResponseNotFound(f"No response with id {value[:80]!r} was found.", field=field)
    return run


def response_store(run: Run, echo: dict[str, Any]) -> None:
    """Keep the request's echoed fields with the run: it is a stored response from now on."""
    Run.objects.filter(pk=run.pk).update(response=echo)


def response_forget(run: Run) -> None:
    """The response is deleted: no longer retrieved nor continued; the turn itself stays."""
    Run.objects.filter(pk=run.pk).update(response=None)


def response_resource(run: Run, echo: dict[str, Any]) -> dict[str, Any]:
    """The `response` object of the run as stored now."""
    run.refresh_from_db()
    state = STATUSES[RunStatus(run.status)]
    output = output_items(run)
    incomplete = None
    if state == "completed" and _cut_short(output):
        state, incomplete = "incomplete", {"reason": "max_output_tokens"}
    error = None
    if state in ("failed", "cancelled"):
        error = {"code": "server_error", "message": run.error or f"The run was {state}."}
    return {
        "id": response_id(run),
        "object": "response",
        "created_at": int(run.created_at.timestamp()),
        "completed_at": int(run.finished_at.timestamp())
        if run.finished_at and state != "in_progress"
        else None,
        "status": state,
        "incomplete_details": incomplete,
        "model": run.conversation.model,
        "output": output,
        "error": error,
        "usage": response_usage(run),
        **FIXED,
        **_echoed(echo),
    }


def _echoed(echo: dict[str, Any]) -> dict[str, Any]:
    """The request's fields as the response shows them (the spec's defaults where none)."""
    return {
        **echo,
        "temperature": 1.0 if echo.get("temperature") is None else echo["temperature"],
        "top_p": 1.0 if echo.get("top_p") is None else echo["top_p"],
    }


def _cut_short(output: list[dict[str, Any]]) -> bool:
    return any(item.get("status") == "incomplete" for item in output)


def output_items(run: Run) -> list[dict[str, Any]]:
    """The run's answers and calls, in order, as output items."""
    answers = Message.objects.filter(
        run=run, role=Role.ASSISTANT, superseded_at__isnull=True
    ).order_by("position")
    executions = {e.tool_call_id: e for e in ToolExecution.objects.filter(run=run)}
    client_names = client_tool_names(run)
    items: list[dict[str, Any]] = []
    for answer in answers:
        if answer.content:
            items.append(message_item(answer))
        for call in answer.tool_calls or []:
            execution = executions.get(call.get("id"))
            if execution is None:
                continue
            if call["function"]["name"] in client_names:
                items.append(_function_call(execution, call))
            else:
                items.append(_mcp_call(execution, call))
    if run.status == RunStatus.AWAITING_APPROVAL:
        items.append(text_item(f"msg_{run.pk.hex}", approval_text(run), "completed"))
    return items


def message_item(message: Message) -> dict[str, Any]:
    status = "incomplete" if message.finish_reason == "length" else "completed"
    return text_item(f"msg_{message.pk.hex}", message.content or "", status)


def text_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    """A `message` item of the assistant: one `output_text` part."""
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": [output_text(text)] if status != "in_progress" else [],
    }


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _function_call(execution: ToolExecution, call: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{execution.pk.hex}",
        "call_id": execution.tool_call_id,
        "name": execution.name,
        "arguments": call["function"].get("arguments") or "",
        "status": "completed",
    }


def _mcp_call(execution: ToolExecution, call: dict[str, Any]) -> dict[str, Any]:
    status = CALL_STATUSES.get(ExecutionStatus(execution.status), "calling")
    error = None
    if status == "failed":
        text = execution.error or execution.content or f"The call was {execution.status}."
        error = {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": text}]}
    return {
        "type": "mcp_call",
        "id": f"mcp_{execution.pk.hex}",
        "server_label": SERVER_LABEL,
        "name": execution.name,
        "arguments": call["function"].get("arguments") or "",
        "output": execution.content if status == "completed" else None,
        "error": error,
        "status": status,
        "approval_request_id": None,
    }


def response_usage(run: Run) -> dict[str, Any]:
    """Every model call of the turn, summed, in the Responses API's names."""
    usage = run_usage(run)
    return {
        "input_tokens": usage["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage["total_tokens"],
    }
