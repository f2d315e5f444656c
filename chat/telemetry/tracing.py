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
run (`turn_end`, from chat/engine/finish.py `run_end`).

Message text, tool arguments and results are exported only with
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`, the arguments masked
as the audit masks sensitive parameters (tools/audit.py).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tools.audit import arguments_for_audit

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

    from chat.llm.base import ChatRequest, Completion
    from chat.models import ModelCall, Run, ToolExecution
    from tools.results import ToolResult

AGENT_NAME = "toolchat"
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")

# A span id chosen ahead (the turn's, stored on its run): the id generator hands it out.
_preset_ids: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "toolchat_preset_span_ids", default=None
)


class _State:
    """This process's tracer, made on first use (per process id: a fork makes its own)."""

    pid: int | None = None
    provider: TracerProvider | None = None
    tracer: Tracer | None = None
    capture: bool = False
    lock = threading.Lock()


def tracing_configured() -> bool:
    """Whether traces are to be exported: an OTLP endpoint is set."""
    return any(os.environ.get(name) for name in ENDPOINT_VARIABLES)


def _tracer() -> Tracer | None:
    """The process's tracer, or None when tracing is off (the common, free case)."""
    if _State.pid == os.getpid():
        return _State.tracer
    return tracing_start()


def tracing_start() -> Tracer | None:
    """Make this process's tracer provider, if configured; idempotent per process."""
    with _State.lock:
        if _State.pid == os.getpid():
            return _State.tracer
        _State.pid = os.getpid()
        _State.provider = _State.tracer = None
        if not tracing_configured():
            return None
        _State.provider = _provider_make()
        _State.tracer = _State.provider.get_tracer("toolchat")
        _State.capture = os.environ.get(CAPTURE_CONTENT, "").strip().lower() == "true"
        return _State.tracer


# How long an exiting worker waits for its last spans to go: a collector that is down
# must not hold up a worker's shutdown.
FLUSH_TIMEOUT_MS = 5000


def tracing_flush() -> None:
    """Export what this process has (a worker process about to exit), waiting 5 s at most."""
    if _State.provider is not None and _State.pid == os.getpid():
        _State.provider.force_flush(timeout_millis=FLUSH_TIMEOUT_MS)


def tracing_reset() -> None:
    """Shut this process's provider down; the next span reads the environment again."""
    with _State.lock:
        if _State.provider is not None and _State.pid == os.getpid():
            _State.provider.shutdown()
        _State.pid = None
        _State.provider = _State.tracer = None


def _provider_make() -> TracerProvider:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class PresetIds(RandomIdGenerator):
        """Random ids, except the turn's span's, chosen when its run was made."""

        def generate_span_id(self) -> int:
            preset = _preset_ids.get()
            return preset[1] if preset else super().generate_span_id()

        def generate_trace_id(self) -> int:
            preset = _preset_ids.get()
            return preset[0] if preset else super().generate_trace_id()

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: AGENT_NAME}))
    # The sampler comes from OTEL_TRACES_SAMPLER (the SDK's default: parent-based, always on).
    provider = TracerProvider(resource=resource, id_generator=PresetIds())
    provider.add_span_processor(BatchSpanProcessor(_exporter_make()))
    return provider


def _exporter_make() -> Any:
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    return HttpSpanExporter()


# --- Context: in from a request, stored on the run, out on model requests --------------------


def context_extract(headers: Mapping[str, str]) -> Context | None:
    """The caller's trace context from W3C `traceparent` headers; None when tracing is off."""
    if _tracer() is None:
        return None
    from opentelemetry import propagate

    return propagate.extract(headers)


@contextlib.contextmanager
def caller_context(headers: Mapping[str, str]) -> Iterator[None]:
    """Within the block, the caller's trace (its `traceparent` header) is current, if any."""
    if "traceparent" not in headers:
        yield
        return
    context = context_extract(headers)
    if context is None:
        yield
        return
    from opentelemetry import context as otel_context

    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


def headers_inject(headers: MutableMapping[str, str]) -> None:
    """Add `traceparent` (and the propagators' other headers) for the current span, if any."""
    if _State.tracer is None or _State.pid != os.getpid():
        return
    from opentelemetry import propagate, trace

    if trace.get_current_span().get_span_context().is_valid:
        propagate.inject(headers)


def turn_trace_parent() -> str:
    """The trace context of a new run's turn, to store on it ("" when tracing is off).

    The turn's span continues the current context (a request's `traceparent`),
    or starts a trace. The sampler decides now, once: the flags are stored.
    """
    tracer = _tracer()
    if tracer is None or _State.provider is None:
        return ""
    from opentelemetry import trace
    from opentelemetry.context import get_current

    parent = trace.get_current_span().get_span_context()
    ids = _State.provider.id_generator
    trace_id = parent.trace_id if parent.is_valid else ids.generate_trace_id()
    decision = _State.provider.sampler.should_sample(
        get_current() if parent.is_valid else None,
        trace_id,
        f"invoke_agent {AGENT_NAME}",
        trace.SpanKind.INTERNAL,
    )
    flags = 1 if decision.decision.is_sampled() else 0  # type: ignore[no-untyped-call]
    value = f"00-{trace_id:032x}-{ids.generate_span_id():016x}-{flags:02x}"
    return f"{value} {parent.span_id:016x}" if parent.is_valid else value


def _parse(stored: str) -> tuple[int, int, int, int | None] | None:
    """(trace id, the turn's span id, flags, the caller's span id) of a run's `trace_parent`."""
    try:
        traceparent, _, caller = stored.partition(" ")
        _, trace_id, span_id, flags = traceparent.split("-")
        return (
            int(trace_id, 16),
            int(span_id, 16),
            int(flags, 16),
            int(caller, 16) if caller else None,
        )
    except ValueError:
        return None


def _remote(trace_id: int, span_id: int, flags: int) -> Context:
    from opentelemetry import trace

    span_context = trace.SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(flags)
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context))


def _turn_context(run: Run) -> Context | None:
    """The context a run's calls are children of: its turn's span, made now if the run has none."""
    if not run.trace_parent:
        from chat.models import Run as RunModel

        run.trace_parent = turn_trace_parent()
        if not run.trace_parent:
            return None
        RunModel.objects.filter(pk=run.pk, trace_parent="").update(trace_parent=run.trace_parent)
    parsed = _parse(run.trace_parent)
    if parsed is None:
        return None
    trace_id, span_id, flags, _ = parsed
    return _remote(trace_id, span_id, flags)


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1e9)


# --- The turn ---------------------------------------------------------------------------------


def turn_end(run: Run) -> None:
    """Write the turn's span, with the ids stored on the run and its recorded times."""
    tracer = _tracer()
    if tracer is None or not run.trace_parent:
        return
    parsed = _parse(run.trace_parent)
    if parsed is None or not parsed[2] & 1:
        return  # not sampled: nothing of the turn is exported
    from opentelemetry import trace
    from opentelemetry.context import Context as EmptyContext

    trace_id, span_id, flags, caller = parsed
    parent = _remote(trace_id, caller, flags) if caller else EmptyContext()
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
    token = _preset_ids.set((trace_id, span_id))
    try:
        span = tracer.start_span(
            f"invoke_agent {AGENT_NAME}",
            context=parent,
            kind=trace.SpanKind.INTERNAL,
            attributes=attributes,
            start_time=_ns(run.created_at),
        )
    finally:
        _preset_ids.reset(token)
    if str(run.status) == "failed":
        span.set_attribute("error.type", "run_failed")
        span.set_status(trace.StatusCode.ERROR, run.error[:500])
    span.end(end_time=_ns(run.finished_at) if run.finished_at else None)


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
    tracer = _tracer()
    parent = _turn_context(run) if tracer is not None else None
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
    if _State.capture:
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
    if _State.capture and content:
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
    tracer = _tracer()
    parent = _turn_context(run) if tracer is not None else None
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
        start_time=_ns(row.started_at),
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
    span.end(end_time=_ns(end) if end is not None else None)


def run_export(run: Run) -> bool:
    """Send an ended run's trace from its stored rows, with their recorded times.

    For runs from before tracing was on (or whose spans were lost): its turn,
    its model calls and its tool executions, with no message content. A run
    with no trace yet is given one (stored on it). False when tracing is off.
    """
    tracer = _tracer()
    parent = _turn_context(run) if tracer is not None else None
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
            start_time=_ns(execution.started_at),
        )
        span.set_attribute("toolchat.tool.status", str(execution.status))
        span.set_attribute("toolchat.tool.truncated", execution.truncated)
        if str(execution.status) != "succeeded":
            span.set_attribute("error.type", str(execution.status))
            span.set_status(trace.StatusCode.ERROR)
        span.end(end_time=_ns(execution.finished_at) if execution.finished_at else None)
    turn_end(run)
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
    tracer = _tracer()
    parent = _turn_context(run) if tracer is not None else None
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
        if _State.capture:
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
