"""A loopback OTLP/HTTP receiver: what a collector (Jaeger, Phoenix, Langfuse) would be sent.

It decodes each `ExportTraceServiceRequest` with the real `opentelemetry-proto`
messages and keeps the spans, their ids as hex and their attributes as Python
values, so a test reads exactly what went over the wire.
"""

from __future__ import annotations

import dataclasses
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.llm_server import STOP_POLL_S


@dataclasses.dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    status_code: int  # 0 unset, 1 ok, 2 error
    start_ns: int
    end_ns: int
    resource: dict[str, Any]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


class OTLPReceiver:
    """POST /v1/traces (http/protobuf) on 127.0.0.1; `spans` lists what arrived."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> OTLPReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver._receive(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": STOP_POLL_S}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _receive(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self._keep(request)

    def _keep(self, request: ExportTraceServiceRequest) -> None:
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            status_code=span.status.code,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            resource=resource,
                        )
                    )
        with self._lock:
            self.requests += 1
            self.spans.extend(spans)


class GrpcOTLPReceiver(OTLPReceiver):
    """The same, as an OTLP/gRPC TraceService on 127.0.0.1 (`grpc` protocol)."""

    def __init__(self) -> None:
        super().__init__()
        self._grpc: Any = None
        self._port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> GrpcOTLPReceiver:
        from concurrent import futures

        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

        receiver = self

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                receiver._keep(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), self._grpc)
        self._port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._grpc.start()
        return self

    def stop(self) -> None:
        if self._grpc is not None:
            self._grpc.stop(grace=None)
