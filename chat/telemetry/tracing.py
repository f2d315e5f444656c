"""OpenTelemetry traces of the turn, with the GenAI semantic conventions.

On only when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
is set; otherwise every function here returns at its first line and the SDK is
never imported. The SDK reads the rest of the standard variables itself
(`OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
`OTEL_TRACES_SAMPLER`, the exporter's headers and timeouts). The provider is
made per process, on first use: a Celery prefork child makes its own after the
fork (and `project/celery.py` starts it at `worker_process_init`).

The spans, as the GenAI conventions (semconv schema 1.44, the development-status
`gen_ai.*` registry) name them:

    invoke_agent toolchat       one per turn (run), from its post to its end
      chat {model}              one per model call, under the turn
      execute_tool {tool}       one per tool execution, under the turn

A run's steps run in different processes, and a worker that dies leaves its
run to another. So the turn's span is not held open anywhere: its identity is
chosen when the run is made (`turn_trace_parent`), stored on the Run
(`Run.trace_parent`: the W3C traceparent of the turn's span, then the caller's
span id when a request's `traceparent` was continued), every call's span is
made the child of that stored context, and the turn's own span is written
once, with the stored ids and the run's recorded times, by whoever ends the
run (`turn_span_write`, from chat/engine/finish.py `run_end`).

Message text, tool arguments and results are exported only with
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`, the arguments masked
as the audit masks sensitive parameters (tools/audit.py).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from chat.telemetry.propagation import (
    nanoseconds,
    remote_context,
    trace_parent_parse,
    turn_context,
)
from chat.telemetry.provider import AGENT_NAME, TracerState, current_tracer, preset_ids
from tools.audit import arguments_for_audit

if TYPE_CHECKING:
    from datetime import datetime

    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

    from chat.llm.base import ChatRequest, Completion
    from chat.models import ModelCall, Run, ToolExecution
    from tools.results import ToolResult


# --- The turn ---------------------------------------------------------------------------------


def turn_span_write(run: Run) -> None:
    """Write the turn's span, with the ids stored on the run and its recorded times."""
    tracer = current_tracer()
    if tracer is None or not run.trace_parent:
        return
    parsed = trace_parent_parse(run.trace_parent)
    if parsed is None or not parsed[2] & 1:
        return  # not sampled: nothing of the turn is exported
    from opentelemetry import trace
    from opentelemetry.context import Context as EmptyContext

    trace_id, span_id, flags, caller = parsed
    parent = remote_context(trace_id, caller, flags) if caller else EmptyContext()
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": AGENT_NAME,
        "gen_ai.conversation.id": str(run.conversation_id),
        "toolchat.run.id": str(run.pk),
        "toolchat.run.mode": str(run.mode),
        "toolchat.run.outcome": str(run.status),
        "toolchat.run.model_calls": run.model_calls,
        "toolchat.run.steps": run.steps,
    }
    conversation = run.conversation if type(run).conversation.is_cached(run) else None
    if conversation is not None:
        attributes["gen_ai.request.model"] = conversation.model
    token = preset_ids.set((trace_id, span_id))
    try:
        span = tracer.start_span(
            f"invoke_agent {AGENT_NAME}",
            context=parent,
            kind=trace.SpanKind.INTERNAL,
            attributes=attributes,
            start_time=nanoseconds(run.created_at),
        )
    finally:
        preset_ids.reset(token)
    if str(run.status) == "failed":
        span.set_attribute("error.type", "run_failed")
        span.set_status(trace.StatusCode.ERROR, run.error[:500])
    span.end(end_time=nanoseconds(run.finished_at) if run.finished_at else None)


# --- A model call -----------------------------------------------------------------------------

ModelCallRecord = Callable[["ModelCall", "Completion | None"], None]


def _noop_record(row: ModelCall, completion: Completion | None) -> None:
    return None


@contextlib.contextmanager
def model_call_span(run: Run, request: ChatRequest, *, provider: str) -> Iterator[ModelCallRecord]:
    """The span of one model call, current while the call is made (its requests carry it).

    The block calls the yielded function with the call's row and completion
    when the call ended; an exception that leaves the block is the span's error.
    """
    tracer = current_tracer()
    parent = turn_context(run) if tracer is not None else None
    if tracer is None or parent is None:
        yield _noop_record
        return
    from opentelemetry import trace

    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": request.model,
        "gen_ai.conversation.id": str(run.conversation_id),
        "toolchat.run.id": str(run.pk),
    }
    if request.temperature is not None:
        attributes["gen_ai.request.temperature"] = request.temperature
    if request.max_tokens is not None:
        attributes["gen_ai.request.max_tokens"] = request.max_tokens
    if TracerState.capture:
        attributes["gen_ai.input.messages"] = json.dumps(
            [_message_parts(m) for m in request.messages], ensure_ascii=False
        )
        if request.tools:
            attributes["gen_ai.tool.definitions"] = json.dumps(request.tools, ensure_ascii=False)
    span = tracer.start_span(
        f"chat {request.model}", context=parent, kind=trace.SpanKind.CLIENT, attributes=attributes
    )

    def record(row: ModelCall, completion: Completion | None) -> None:
        _model_call_attributes(span, row, completion)

    with trace.use_span(
        span, end_on_exit=True, record_exception=True, set_status_on_exception=True
    ):
        yield record


def _model_call_attributes(
    span: Span, row: ModelCall, completion: Completion | None, *, content: bool = True
) -> None:
    from opentelemetry import trace

    span.set_attribute("toolchat.model_call.id", str(row.pk))
    span.set_attribute("toolchat.model_call.purpose", str(row.purpose))
    span.set_attribute("toolchat.model_call.attempts", row.attempts)
    if row.model:
        span.set_attribute("gen_ai.response.model", row.model)
    if completion is None:
        span.set_attribute("error.type", _error_type(row.error))
        span.set_status(trace.StatusCode.ERROR, row.error[:500])
        return
    if completion.response_id:
        span.set_attribute("gen_ai.response.id", completion.response_id)
    if completion.finish_reason:
        span.set_attribute("gen_ai.response.finish_reasons", [completion.finish_reason])
    if completion.prompt_tokens is not None:
        span.set_attribute("gen_ai.usage.input_tokens", completion.prompt_tokens)
    if completion.completion_tokens is not None:
        span.set_attribute("gen_ai.usage.output_tokens", completion.completion_tokens)
    if completion.first_token_ms is not None:
        span.set_attribute("gen_ai.response.time_to_first_chunk", completion.first_token_ms / 1000)
    if TracerState.capture and content:
        span.set_attribute(
            "gen_ai.output.messages",
            json.dumps([_output_message(completion)], ensure_ascii=False),
        )


def _error_type(error: str) -> str:
    """A low-cardinality `error.type` for a failed call, from its stored error."""
    if error.startswith("Stopped"):
        return "cancelled"
    if "stopped before it finished" in error:
        return "worker_lost"
    if "without finishing" in error:
        return "incomplete_stream"
    if "no text" in error.lower():
        return "no_text"
    return "provider_error"


def model_call_lost(run: Run, row: ModelCall) -> None:
    """The span of a call whose worker died mid-call, from its recorded row (a take-over)."""
    tracer = current_tracer()
    parent = turn_context(run) if tracer is not None else None
    if tracer is None or parent is None:
        return
    _recorded_call_span(tracer, parent, run, row, end=None)


def _recorded_call_span(
    tracer: Tracer, parent: Context, run: Run, row: ModelCall, *, end: datetime | None
) -> None:
    """A model call's span from its audit row alone, at its recorded start (and end)."""
    from opentelemetry import trace

    from chat.llm.base import Completion as Answer

    span = tracer.start_span(
        f"chat {row.model}",
        context=parent,
        kind=trace.SpanKind.CLIENT,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": row.provider,
            "gen_ai.request.model": row.model,
            "gen_ai.conversation.id": str(run.conversation_id),
            "toolchat.run.id": str(run.pk),
        },
        start_time=nanoseconds(row.started_at),
    )
    answered = None
    if str(row.status) == "succeeded":
        answered = Answer(
            content=None,
            finish_reason=row.finish_reason,
            model=row.model,
            prompt_tokens=row.prompt_tokens,
            completion_tokens=row.completion_tokens,
            first_token_ms=row.first_token_ms,
            latency_ms=row.latency_ms or 0,
            attempts=row.attempts,
        )
    _model_call_attributes(span, row, answered, content=False)
    span.end(end_time=nanoseconds(end) if end is not None else None)


def run_export(run: Run) -> bool:
    """Send an ended run's trace from its stored rows, with their recorded times.

    For runs from before tracing was on (or whose spans were lost): its turn,
    its model calls and its tool executions, with no message content. A run
    with no trace yet is given one (stored on it). False when tracing is off.
    """
    tracer = current_tracer()
    parent = turn_context(run) if tracer is not None else None
    if tracer is None or parent is None:
        return False
    from datetime import timedelta

    from opentelemetry import trace

    from chat.models import ModelCall as Call
    from chat.models import ToolExecution as Execution

    for row in Call.objects.filter(run=run).order_by("started_at"):
        end = row.started_at + timedelta(milliseconds=row.latency_ms or 0)
        _recorded_call_span(tracer, parent, run, row, end=end)
    for execution in Execution.objects.filter(run=run, started_at__isnull=False):
        assert execution.started_at is not None
        span = tracer.start_span(
            f"execute_tool {execution.name}",
            context=parent,
            kind=trace.SpanKind.INTERNAL,
            attributes=_tool_attributes(run, execution, tool_type="function"),
            start_time=nanoseconds(execution.started_at),
        )
        span.set_attribute("toolchat.tool.status", str(execution.status))
        span.set_attribute("toolchat.tool.truncated", execution.truncated)
        if str(execution.status) != "succeeded":
            span.set_attribute("error.type", str(execution.status))
            span.set_status(trace.StatusCode.ERROR)
        span.end(end_time=nanoseconds(execution.finished_at) if execution.finished_at else None)
    turn_span_write(run)
    return True


def _message_parts(message: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI-format message in the conventions' shape (role and parts), arguments masked."""
    role = str(message.get("role") or "")
    parts: list[dict[str, Any]] = []
    if role == "tool":
        parts.append(
            {
                "type": "tool_call_response",
                "id": message.get("tool_call_id"),
                "response": message.get("content"),
            }
        )
        return {"role": role, "parts": parts}
    content = message.get("content")
    if isinstance(content, str) and content:
        parts.append({"type": "text", "content": content})
    elif isinstance(content, list):
        parts.extend(
            {"type": "text", "content": p.get("text", "")} for p in content if isinstance(p, dict)
        )
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        parts.append(_call_part(str(call.get("id") or ""), function))
    return {"role": role, "parts": parts}


def _call_part(call_id: str, function: Mapping[str, Any]) -> dict[str, Any]:
    name = str(function.get("name") or "")
    arguments, raw = arguments_for_audit(name, str(function.get("arguments") or ""))
    return {
        "type": "tool_call",
        "id": call_id,
        "name": name,
        "arguments": arguments if arguments is not None else raw,
    }


def _output_message(completion: Completion) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if completion.content:
        parts.append({"type": "text", "content": completion.content})
    parts.extend(
        _call_part(call.id, {"name": call.name, "arguments": call.arguments})
        for call in completion.tool_calls
    )
    return {"role": "assistant", "parts": parts, "finish_reason": completion.finish_reason}


# --- A tool execution -------------------------------------------------------------------------

ToolRecord = Callable[["ToolResult"], None]


def _noop_tool_record(result: ToolResult) -> None:
    return None


def _tool_attributes(run: Run, execution: ToolExecution, *, tool_type: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": execution.name,
        "gen_ai.tool.call.id": execution.tool_call_id,
        "gen_ai.tool.type": tool_type,
        "gen_ai.conversation.id": str(run.conversation_id),
        "toolchat.run.id": str(run.pk),
        "toolchat.tool.execution_id": str(execution.pk),
        "toolchat.tool.attempt": execution.attempts,
    }
    if execution.approval_wait_ms is not None:
        attributes["toolchat.tool.approval_wait_ms"] = execution.approval_wait_ms
    return attributes


@contextlib.contextmanager
def tool_span(run: Run, execution: ToolExecution, *, tool_type: str) -> Iterator[ToolRecord]:
    """The span of one tool execution; the block calls the yielded function with its result."""
    tracer = current_tracer()
    parent = turn_context(run) if tracer is not None else None
    if tracer is None or parent is None:
        yield _noop_tool_record
        return
    from opentelemetry import trace

    span = tracer.start_span(
        f"execute_tool {execution.name}",
        context=parent,
        kind=trace.SpanKind.INTERNAL,
        attributes=_tool_attributes(run, execution, tool_type=tool_type),
    )

    def record(result: ToolResult) -> None:
        span.set_attribute("toolchat.tool.status", str(result.status))
        span.set_attribute("toolchat.tool.truncated", result.truncated)
        span.set_attribute("toolchat.tool.result_chars", result.result_chars)
        if str(result.status) != "succeeded":
            span.set_attribute("error.type", result.error_type or str(result.status))
            span.set_status(trace.StatusCode.ERROR, result.error[:500])
        if TracerState.capture:
            arguments: Any = result.audit_arguments
            if arguments is None:
                arguments = result.arguments_raw
            span.set_attribute(
                "gen_ai.tool.call.arguments", json.dumps(arguments, ensure_ascii=False)
            )
            span.set_attribute("gen_ai.tool.call.result", result.content)

    with trace.use_span(
        span, end_on_exit=True, record_exception=True, set_status_on_exception=True
    ):
        yield record
