"""A loopback OTLP receiver, with the tracing environment pointed at it."""

from __future__ import annotations

import pytest

from chat.models import Run
from chat.telemetry.provider import tracing_flush, tracing_reset
from tests.assertions import wait_until
from tests.otlp_receiver import OTLPReceiver, ReceivedSpan
from tests.tools.mcp.conftest import mcp_servers

__all__ = ["mcp_servers"]  # a fixture, for the MCP call's trace


@pytest.fixture
def otlp(monkeypatch):
    receiver = OTLPReceiver().start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "toolchat-tests")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    tracing_reset()
    yield receiver
    tracing_reset()
    receiver.stop()


@pytest.fixture
def capture(monkeypatch, otlp):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    tracing_reset()
    return otlp


def turn_spans(receiver: OTLPReceiver, run: Run, count: int) -> list[ReceivedSpan]:
    """The spans of the run's trace once `count` have arrived, the turn's first."""
    run.refresh_from_db()
    trace_id = run.trace_parent.split("-")[1]

    def spans() -> list[ReceivedSpan]:
        tracing_flush()
        return [s for s in receiver.spans if s.trace_id == trace_id]

    wait_until(lambda: len(spans()) >= count, what=f"{count} spans of the run's trace")
    received = spans()
    assert len(received) == count, [s.name for s in received]
    return sorted(received, key=lambda s: (not s.name.startswith("invoke_agent"), s.start_ns))


def by_operation(spans: list[ReceivedSpan], operation: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.attributes.get("gen_ai.operation.name") == operation]
