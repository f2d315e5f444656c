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
from datetime import UTC, datetime
from typing import Any

from django.db.models import Sum

from chat.engine.request import client_tool_names
from chat.exceptions import NotFound
from chat.models import ExecutionStatus, Message, ModelCall, Role, Run, RunStatus, ToolExecution

SERVER_LABEL = "toolchat"
# Keys of Run.response that are toolchat's own, not echoed: the parts after approvals.
PARTS, DELETED = "parts", "deleted"
PRIVATE = frozenset({PARTS, DELETED, "input_items"})
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


def response_id(run: Run, part: int = 0) -> str:
    """`resp_` and the run's id; a part after an approval adds its number (`resp_..._1`)."""
    return f"resp_{run.pk.hex}" + (f"_{part}" if part else "")


def response_run(user: Any, value: str, *, field: str | None = None) -> Run:
    """The user's stored response with this id, or ResponseNotFound."""
    return response_ref(user, value, field=field)[0]


def response_ref(user: Any, value: str, *, field: str | None = None) -> tuple[Run, int]:
    """The user's stored response with this id: its run and its part, or ResponseNotFound."""
    run_id: uuid.UUID | None = None
    hex_id, _, number = value.removeprefix("resp_").partition("_")
    part = int(number) if number.isdigit() and not number.startswith("0") else 0
    if value.startswith("resp_") and (part or not number):
        try:
            run_id = uuid.UUID(hex=hex_id)
        except ValueError:
            run_id = None
    run = (
        Run.objects.select_related("conversation")
        .filter(pk=run_id, conversation__owner=user, response__isnull=False)
        .first()
        if run_id
        else None
    )
    if run is None or not _part_stored(run, part):
        raise ResponseNotFound(f"No response with id {value[:80]!r} was found.", field=field)
    return run, part


def _part_stored(run: Run, part: int) -> bool:
    parts = response_parts(run)
    if part == 0:
        return not (run.response or {}).get(DELETED)
    return part <= len(parts) and parts[part - 1].get("stored", True)


def response_parts(run: Run) -> list[dict[str, Any]]:
    """The responses that went on with the run after an approval: `{"since", "echo", ...}`."""
    return list((run.response or {}).get(PARTS) or [])


def response_echo(run: Run, part: int) -> dict[str, Any]:
    """What a stored response echoes of its request."""
    stored = run.response or {}
    return dict(response_parts(run)[part - 1]["echo"]) if part else stored


def response_store(run: Run, echo: dict[str, Any]) -> None:
    """Keep the request's echoed fields with the run: it is a stored response from now on."""
    Run.objects.filter(pk=run.pk).update(response=echo)


def response_forget(run: Run, part: int = 0) -> None:
    """The response is deleted: no longer retrieved nor continued; the turn itself stays.

    The parts after an approval are responses of their own, kept when the
    first is deleted (and it, when one of them is).
    """
    parts = response_parts(run)
    if part:
        parts[part - 1] = {**parts[part - 1], "stored": False}
        Run.objects.filter(pk=run.pk).update(response={**(run.response or {}), PARTS: parts})
    elif parts:
        Run.objects.filter(pk=run.pk).update(response={DELETED: True, PARTS: parts})
    else:
        Run.objects.filter(pk=run.pk).update(response=None)


def response_resource(run: Run, echo: dict[str, Any], part: int = 0) -> dict[str, Any]:
    """The `response` object of the run (or of its part after an approval) as stored now."""
    run.refresh_from_db()
    since, until = _window(run, part)
    state = STATUSES[RunStatus(run.status)]
    if until is not None or run.status == RunStatus.AWAITING_APPROVAL:
        state = "completed"  # it ended with the calls that wait for a decision
    timed = _timed_items(run)
    output = [item for at, item in timed if since <= at and (until is None or at < until)]
    incomplete = None
    if state == "completed" and _cut_short(output):
        state, incomplete = "incomplete", {"reason": "max_output_tokens"}
    error = None
    if state in ("failed", "cancelled"):
        error = {"code": "server_error", "message": run.error or f"The run was {state}."}
    ended = until or (run.finished_at if state not in ("queued", "in_progress") else None)
    if ended is None and run.status == RunStatus.AWAITING_APPROVAL:
        ended = max((at for at, _ in timed), default=None)
    return {
        "id": response_id(run, part),
        "object": "response",
        "created_at": int((since if part else run.created_at).timestamp()),
        "completed_at": int(ended.timestamp()) if ended else None,
        "status": state,
        "incomplete_details": incomplete,
        "model": run.conversation.model,
        "output": output,
        "error": error,
        "usage": response_usage(run, since, until),
        **FIXED,
        **_echoed(echo),
    }


def _window(run: Run, part: int) -> tuple[datetime, datetime | None]:
    """When the part began (the decision that started it), and when the next one did."""
    bounds = [datetime.fromisoformat(p["since"]) for p in response_parts(run)]
    since = bounds[part - 1] if part else datetime.min.replace(tzinfo=UTC)
    return since, bounds[part] if part < len(bounds) else None


def _echoed(echo: dict[str, Any]) -> dict[str, Any]:
    """The request's fields as the response shows them (the spec's defaults where none)."""
    shown = {key: value for key, value in echo.items() if key not in PRIVATE}
    return {
        **shown,
        "temperature": 1.0 if echo.get("temperature") is None else echo["temperature"],
        "top_p": 1.0 if echo.get("top_p") is None else echo["top_p"],
    }


def _cut_short(output: list[dict[str, Any]]) -> bool:
    return any(item.get("status") == "incomplete" for item in output)


def output_items(run: Run) -> list[dict[str, Any]]:
    """The run's answers and calls, in order, as output items (of every part)."""
    return [item for _, item in _timed_items(run)]


def _timed_items(run: Run) -> list[tuple[datetime, dict[str, Any]]]:
    """Each output item with when it happened, which says the part it belongs to.

    A call that waited for a person is an `mcp_approval_request` when it was
    asked for, and its `mcp_call` (naming the request) when it was decided.
    """
    answers = Message.objects.filter(
        run=run, role=Role.ASSISTANT, superseded_at__isnull=True
    ).order_by("position")
    executions = {
        e.tool_call_id: e
        for e in ToolExecution.objects.filter(run=run).select_related("standing_approval")
    }
    client_names = client_tool_names(run)
    items: list[tuple[datetime, dict[str, Any]]] = []
    for answer in answers:
        if answer.content:
            items.append((answer.created_at, message_item(answer)))
        for call in answer.tool_calls or []:
            execution = executions.get(call.get("id"))
            if execution is None:
                continue
            if call["function"]["name"] in client_names:
                items.append((execution.created_at, function_call_item(execution, call)))
            elif _waited(execution):
                items.append((execution.created_at, approval_request(execution, call)))
                if execution.status != ExecutionStatus.AWAITING_APPROVAL:
                    at = execution.decided_at or execution.created_at
                    items.append(
                        (at, mcp_call_item(execution, call, approval_request_id(execution)))
                    )
            else:
                items.append((execution.created_at, mcp_call_item(execution, call)))
    return items


def _waited(execution: ToolExecution) -> bool:
    """Whether the call waited for a person's decision (not one a standing approval let run)."""
    if execution.status == ExecutionStatus.AWAITING_APPROVAL:
        return True
    if execution.decided_at is None:
        return False
    standing = execution.standing_approval
    return standing is None or standing.created_from_id == execution.pk


def approvals_decided(run: Run) -> dict[str, str]:
    """The run's calls that waited for a decision: each call's id, its approval request's id."""
    executions = ToolExecution.objects.filter(run=run, decided_at__isnull=False)
    return {
        str(e.pk): approval_request_id(e)
        for e in executions.select_related("standing_approval")
        if _waited(e)
    }


def approval_request_id(execution: ToolExecution) -> str:
    return f"mcpr_{execution.pk.hex}"


def approval_request(execution: ToolExecution, call: dict[str, Any]) -> dict[str, Any]:
    """A call of toolchat's that waits (or waited) for a person: OpenAI's approval request."""
    return {
        "type": "mcp_approval_request",
        "id": approval_request_id(execution),
        "server_label": SERVER_LABEL,
        "name": execution.name,
        "arguments": call["function"].get("arguments") or "",
    }


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


def function_call_item(execution: ToolExecution, call: dict[str, Any]) -> dict[str, Any]:
    """A call of one of the client's tools, which the client answers."""
    return {
        "type": "function_call",
        "id": f"fc_{execution.pk.hex}",
        "call_id": execution.tool_call_id,
        "name": execution.name,
        "arguments": call["function"].get("arguments") or "",
        "status": "completed",
    }


def mcp_call_item(
    execution: ToolExecution, call: dict[str, Any], approval: str | None = None
) -> dict[str, Any]:
    """A call of one of toolchat's tools, which it ran (or runs) on the server."""
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
        "approval_request_id": approval,
    }


def response_usage(
    run: Run, since: datetime | None = None, until: datetime | None = None
) -> dict[str, Any]:
    """The model calls of the response (the turn's, or its part's), summed, in the API's names."""
    calls = ModelCall.objects.filter(run=run)
    if since is not None:
        calls = calls.filter(started_at__gte=since)
    if until is not None:
        calls = calls.filter(started_at__lt=until)
    sums = calls.aggregate(prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"))
    prompt, completion = sums["prompt"] or 0, sums["completion"] or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }
