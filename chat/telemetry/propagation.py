"""A turn's trace context: in from a caller's `traceparent`, stored on its run, out on requests.

A run's steps run in different processes, so the turn's context is chosen
when the run is made (`turn_trace_parent`) and kept on `Run.trace_parent`;
every span of the turn is a child of it (`turn_context`). Outgoing model and
tool requests carry the current span (`headers_inject`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, MutableMapping
from datetime import datetime
from typing import TYPE_CHECKING

from chat.telemetry.provider import AGENT_NAME, TracerState, current_tracer

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from chat.models import Run


def context_extract(headers: Mapping[str, str]) -> Context | None:
    """The caller's trace context from W3C `traceparent` headers; None when tracing is off."""
    if current_tracer() is None:
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
    if TracerState.tracer is None or TracerState.pid != os.getpid():
        return
    from opentelemetry import propagate, trace

    if trace.get_current_span().get_span_context().is_valid:
        propagate.inject(headers)


def turn_trace_parent() -> str:
    """The trace context of a new run's turn, to store on it ("" when tracing is off).

    The turn's span continues the current context (a request's `traceparent`),
    or starts a trace. The sampler decides now, once: the flags are stored.
    """
    if current_tracer() is None or TracerState.provider is None:
        return ""
    from opentelemetry import trace
    from opentelemetry.context import get_current

    parent = trace.get_current_span().get_span_context()
    ids = TracerState.provider.id_generator
    trace_id = parent.trace_id if parent.is_valid else ids.generate_trace_id()
    decision = TracerState.provider.sampler.should_sample(
        get_current() if parent.is_valid else None,
        trace_id,
        f"invoke_agent {AGENT_NAME}",
        trace.SpanKind.INTERNAL,
    )
    flags = 1 if decision.decision.is_sampled() else 0  # type: ignore[no-untyped-call]
    value = f"00-{trace_id:032x}-{ids.generate_span_id():016x}-{flags:02x}"
    return f"{value} {parent.span_id:016x}" if parent.is_valid else value


def trace_parent_parse(stored: str) -> tuple[int, int, int, int | None] | None:
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


def remote_context(trace_id: int, span_id: int, flags: int) -> Context:
    from opentelemetry import trace

    span_context = trace.SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(flags)
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context))


def turn_context(run: Run) -> Context | None:
    """The context a run's calls are children of: its turn's span, made now if the run has none."""
    if not run.trace_parent:
        from chat.models import Run as RunModel

        run.trace_parent = turn_trace_parent()
        if not run.trace_parent:
            return None
        RunModel.objects.filter(pk=run.pk, trace_parent="").update(trace_parent=run.trace_parent)
    parsed = trace_parent_parse(run.trace_parent)
    if parsed is None:
        return None
    trace_id, span_id, flags, _ = parsed
    return remote_context(trace_id, span_id, flags)


def nanoseconds(moment: datetime) -> int:
    return int(moment.timestamp() * 1e9)
