"""This process's OpenTelemetry tracer: made on first use, only when an OTLP endpoint is set.

The SDK is imported only then; a Celery prefork child makes its own provider
after the fork (project/celery.py). The spans themselves are written in
chat/telemetry/tracing.py.
"""

from __future__ import annotations

import contextvars
import os
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

AGENT_NAME = "toolchat"
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")

# A span id chosen ahead (the turn's, stored on its run): the id generator hands it out.
preset_ids: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "toolchat_preset_span_ids", default=None
)


class TracerState:
    """This process's tracer, made on first use (per process id: a fork makes its own)."""

    pid: int | None = None
    provider: TracerProvider | None = None
    tracer: Tracer | None = None
    capture: bool = False
    lock = threading.Lock()


def tracing_configured() -> bool:
    """Whether traces are to be exported: an OTLP endpoint is set."""
    return any(os.environ.get(name) for name in ENDPOINT_VARIABLES)


def current_tracer() -> Tracer | None:
    """The process's tracer, or None when tracing is off (the common, free case)."""
    if TracerState.pid == os.getpid():
        return TracerState.tracer
    return tracing_start()


def tracing_start() -> Tracer | None:
    """Make this process's tracer provider, if configured; idempotent per process."""
    with TracerState.lock:
        if TracerState.pid == os.getpid():
            return TracerState.tracer
        provider = tracer = None
        if tracing_configured():
            provider = _provider_make()
            tracer = provider.get_tracer("toolchat")
        TracerState.provider, TracerState.tracer = provider, tracer
        TracerState.capture = os.environ.get(CAPTURE_CONTENT, "").strip().lower() == "true"
        # Last: `current_tracer` reads the pid without the lock, so a thread that sees
        # it set must find the tracer made (not None while the provider is being made).
        TracerState.pid = os.getpid()
        return tracer


# How long an exiting worker waits for its last spans to go: a collector that is down
# must not hold up a worker's shutdown.
FLUSH_TIMEOUT_MS = 5000


def tracing_flush() -> None:
    """Export what this process has (a worker process about to exit), waiting 5 s at most."""
    if TracerState.provider is not None and TracerState.pid == os.getpid():
        TracerState.provider.force_flush(timeout_millis=FLUSH_TIMEOUT_MS)


def tracing_reset() -> None:
    """Shut this process's provider down; the next span reads the environment again."""
    with TracerState.lock:
        if TracerState.provider is not None and TracerState.pid == os.getpid():
            TracerState.provider.shutdown()
        TracerState.pid = None
        TracerState.provider = TracerState.tracer = None


def _provider_make() -> TracerProvider:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class PresetIds(RandomIdGenerator):
        """Random ids, except the turn's span's, chosen when its run was made."""

        def generate_span_id(self) -> int:
            preset = preset_ids.get()
            return preset[1] if preset else super().generate_span_id()

        def generate_trace_id(self) -> int:
            preset = preset_ids.get()
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
