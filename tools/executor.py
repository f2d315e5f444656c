"""The executor: run one tool call and report it, whatever happens.

It validates the arguments, runs the tool in a thread with a deadline, hands
the tool's events to the caller's sink in order, serializes the result, and
applies the last-resort size limit. Every failure becomes a ToolResult whose
`content` the model can read; nothing is raised to the caller. It writes
nothing: the turn engine stores the ToolResult as the audit row and the tool
message.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from django.conf import settings
from pydantic_core import PydanticSerializationError, to_jsonable_python

from tools.arguments import ArgumentsInvalid
from tools.audit import audit_form, mask_arguments
from tools.context import ToolCancelled, ToolContext
from tools.fields import storable_json
from tools.registry import ToolRegistry
from tools.registry import registry as default_registry
from tools.results import (
    ToolOutput,
    ToolResult,
    ToolStatus,
    _failure,
    cancelled_result,
    interrupted_result,
    rejected_result,
    truncate_content,
)
from tools.running import Outcome, run_with_deadline
from tools.spec import ToolSpec

logger = logging.getLogger(__name__)

DEFAULT_MAX_CHARS = 10_000

__all__ = [
    "ToolResult",
    "ToolStatus",
    "cancelled_result",
    "execute_tool",
    "interrupted_result",
    "rejected_result",
]


def execute_tool(
    *,
    name: str,
    arguments: str,
    context: ToolContext,
    registry: ToolRegistry | None = None,
) -> ToolResult:
    """Run one tool call, arguments exactly as the model sent them; never raises."""
    started = time.monotonic()
    tools = registry if registry is not None else default_registry
    context.tool_name = name
    try:
        prepared = _prepare(name=name, arguments=arguments, context=context, tools=tools)
    except Exception as exc:
        # A bug in the executor itself must still leave the model an answer.
        logger.exception("tool %s: the executor failed before running it", name)
        prepared = _failure(name, context, "internal_error", f"The call failed: {exc}", None)
    if isinstance(prepared, ToolResult):
        return _finish(prepared, started)

    spec, kwargs, audit_arguments = prepared
    told = context.ended_after_cancel

    def late(outcome: Outcome) -> None:
        if told is not None:
            told(_reported(spec, context, outcome, audit_arguments, started))

    outcome = run_with_deadline(spec, kwargs, context, late=late if told is not None else None)
    return _reported(spec, context, outcome, audit_arguments, started)


def _reported(
    spec: ToolSpec,
    context: ToolContext,
    outcome: Outcome,
    audit_arguments: dict[str, Any],
    started: float,
) -> ToolResult:
    """The result of a call that ran, as the model and the audit get it."""
    try:
        result = _outcome_result(spec, context, outcome)
    except Exception as exc:
        logger.exception("tool %s: the executor failed while reporting it", spec.name)
        result = _failure(spec.name, context, "internal_error", f"The call failed: {exc}", None)
    result.audit_arguments = audit_arguments
    return _finish(result, started)


# --- Before the call ---------------------------------------------------------------------


def _prepare(
    *, name: str, arguments: str, context: ToolContext, tools: ToolRegistry
) -> ToolResult | tuple[ToolSpec, dict[str, Any], dict[str, Any]]:
    spec = tools.get(name)
    sensitive = spec.sensitive if spec else frozenset()
    text = arguments if isinstance(arguments, str) else str(arguments)

    # Models send "" for a call without parameters; that is an empty object.
    decoded: Any = None
    json_error: json.JSONDecodeError | None = None
    try:
        decoded = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        json_error = exc

    if spec is None:
        known = tools.names()
        result = _failure(
            name,
            context,
            "unknown_tool",
            f"There is no tool called {name!r}. Call one of: {', '.join(known) or 'none'}.",
            {"known_tools": known},
        )
        _keep_arguments(result, text, decoded, sensitive)
        return result

    if json_error is not None:
        result = _failure(
            name,
            context,
            "invalid_json",
            f"The arguments for {name} are not valid JSON ({json_error.msg} at character "
            f"{json_error.pos}). Send one JSON object with the parameters.",
            {"reason": json_error.msg, "position": json_error.pos},
        )
        _keep_arguments(result, text, None, sensitive)
        return result

    if not isinstance(decoded, dict):
        result = _failure(
            name,
            context,
            "invalid_arguments",
            f"The arguments for {name} must be a JSON object of named parameters, "
            f"not {_json_type(decoded)}.",
            {"expected": "object", "got": _json_type(decoded), "parameters": spec.param_names},
        )
        _keep_arguments(result, text, decoded, sensitive)
        return result

    audit_arguments = mask_arguments(decoded, sensitive)
    try:
        kwargs = spec.validate_arguments(decoded)
    except ArgumentsInvalid as exc:
        errors = exc.errors
        summary = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        result = _failure(
            name,
            context,
            "validation_error",
            f"Invalid arguments for {name}: {summary}. Fix them and call the tool again.",
            {"errors": errors},
        )
        result.audit_arguments = audit_arguments
        return result
    logger.debug("tool %s (%s) arguments %s", name, context.tool_call_id, audit_arguments)
    return spec, kwargs, audit_arguments


def _keep_arguments(result: ToolResult, text: str, decoded: Any, sensitive: frozenset[str]) -> None:
    arguments, raw = audit_form(decoded, text, sensitive)
    if arguments is not None:
        result.audit_arguments = arguments
    else:
        result.arguments_raw = raw


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


# --- After the call ------------------------------------------------------------------------


def _outcome_result(spec: ToolSpec, context: ToolContext, outcome: Outcome) -> ToolResult:
    name = spec.name
    failed = _failed_result(spec, context, outcome)
    if failed is not None:
        return failed
    value = outcome.value
    output = value if isinstance(value, ToolOutput) else None
    try:
        raw, full = _serialized(value)
    except (PydanticSerializationError, TypeError, ValueError) as exc:
        logger.warning("tool %s returned a value that is not JSON: %s", name, exc)
        return _failure(
            name,
            context,
            "unserializable_result",
            f"{name} returned a value that cannot be sent as JSON "
            f"({type(outcome.value).__name__}).",
            {"type": type(outcome.value).__name__, "reason": str(exc)},
        )

    limit = int(getattr(settings, "TOOL_RESULT_MAX_CHARS", DEFAULT_MAX_CHARS))
    content, truncated = truncate_content(full, limit)
    if truncated:
        logger.warning(
            "tool %s (%s) returned %d characters, over TOOL_RESULT_MAX_CHARS=%d: %d were "
            "cut from what the model reads; the full result stays in the audit. The tool "
            "should limit its own output.",
            name,
            context.tool_call_id,
            len(full),
            limit,
            len(full) - content.rindex("\n...[truncated"),
        )

    # A tool that reports {"success": false} failed, in its own words: the
    # content is untouched, the audit says failed.
    reported_failure = False
    error = ""
    if output is not None:
        reported_failure = bool(output.error)
        error = str(output.error)
    elif isinstance(raw, dict) and raw.get("success") is False:
        reported_failure = True
        error = str(raw.get("error") or raw.get("message") or f"{name} reported a failure.")
    return ToolResult(
        name=name,
        status=ToolStatus.FAILED if reported_failure else ToolStatus.SUCCEEDED,
        content=content,
        result=raw,
        error=error,
        error_type="tool_reported" if reported_failure else "",
        result_chars=len(full),
        truncated=truncated,
        resource_id=context.last_resource_id,
        resource=context.last_resource,
        return_direct=spec.return_direct and not reported_failure,
        tool_call_id=context.tool_call_id,
    )


def _failed_result(spec: ToolSpec, context: ToolContext, outcome: Outcome) -> ToolResult | None:
    """The result of a call that was cancelled, timed out or raised; None if it returned."""
    name = spec.name
    if outcome.cancelled or (
        isinstance(outcome.exception, ToolCancelled) and not outcome.timed_out
    ):
        logger.info("tool %s (%s) stopped: its call was cancelled", name, context.tool_call_id)
        return cancelled_result(name, tool_call_id=context.tool_call_id)
    if outcome.timed_out:
        result = _failure(
            name,
            context,
            "timeout",
            f"{name} did not finish within its {spec.timeout:g} s timeout; its result was "
            "discarded. Try again with a smaller request, or tell the user it timed out.",
            {"timeout_s": spec.timeout},
            status=ToolStatus.TIMED_OUT,
        )
        logger.warning(
            "tool %s (%s) timed out after %g s", name, context.tool_call_id, spec.timeout
        )
        return result
    if outcome.exception is None:
        return None
    exc = outcome.exception
    kind = type(exc).__name__
    text = str(exc) or kind
    result = _failure(
        name,
        context,
        "tool_error",
        f"{name} failed: {kind}: {text}",
        {"exception": kind, "message": text},
    )
    result.traceback = outcome.traceback
    logger.warning(
        "tool %s (%s) raised %s: %s\n%s",
        name,
        context.tool_call_id,
        kind,
        text,
        outcome.traceback,
    )
    return result


def _serialized(value: Any) -> tuple[Any, str]:
    """A returned value as the audit keeps it (JSON) and as the model reads it (text)."""
    if isinstance(value, ToolOutput):
        return storable_json(to_jsonable_python(value.result)), storable_json(str(value.content))
    raw = value if isinstance(value, str) else to_jsonable_python(value)
    # What the audit keeps and what the model reads agree, and both can be stored.
    raw = storable_json(raw)
    full = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False, allow_nan=False)
    return raw, full


def _finish(result: ToolResult, started: float) -> ToolResult:
    result.duration_ms = int((time.monotonic() - started) * 1000)
    # Timeouts, exceptions and truncation were already logged as warnings with
    # their details; a model's bad arguments are routine.
    logger.info(
        "tool %s (%s) %s in %d ms%s",
        result.name,
        result.tool_call_id,
        result.status,
        result.duration_ms,
        f": {result.error_type}" if result.error_type else "",
    )
    return result
