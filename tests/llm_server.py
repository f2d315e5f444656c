"""A scripted OpenAI-compatible Chat Completions server on loopback.

Tests and benchmarks drive the real `openai` SDK against it. It answers from a
script (a queue of replies) or from a responder function, records every
request, streams like the real API (SSE over chunked HTTP/1.1, usage chunk
when `stream_options.include_usage`), and refuses invalid requests the way the
real API does: an assistant `tool_calls` message whose ids are not each
answered by a `tool` message is a 400. The replies it is scripted with, and
that check, are in tests/llm_replies.py.

    server = ScriptedLLMServer().start()
    server.push(tool_calls_reply([("calculator", '{"expression": "2+2"}')]), text_reply("4"))
    ... OPENAI_BASE_URL=server.base_url ...
    server.stop()
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.llm_replies import (
    Reply,
    completion_of,
    error_reply,
    finish_reason_of,
    raw_reply,
    reset_connection,
    sse,
    text_reply,
    tool_calls_reply,
    usage_of,
    validate_request,
)

STOP_POLL_S = 0.01  # how often a server's thread looks whether stop() was called

# The script's vocabulary, where the tests have always imported it from.
__all__ = [
    "Reply",
    "ScriptedLLMServer",
    "error_reply",
    "raw_reply",
    "sse",
    "text_reply",
    "tool_calls_reply",
    "validate_request",
]


class ScriptedLLMServer:
    """The server: a script queue, a responder fallback, and the recorded requests."""

    def __init__(self, responder: Callable[[dict[str, Any]], Reply] | None = None) -> None:
        self.script: deque[Reply] = deque()
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        # Each request's headers (lower-cased names), beside `requests`.
        self.request_headers: list[dict[str, str]] = []
        # What `GET /v1/models` lists (None: a 404, as servers without the route answer).
        self.models: list[str] | None = None
        self.rejected: list[tuple[dict[str, Any], str]] = []
        self.open_streams = 0  # streamed answers whose client is still connected
        self.connections = 0  # TCP connections accepted, over the server's life
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "start() the server first"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def push(self, *replies: Reply) -> None:
        """Queue replies, answered in order."""
        with self._lock:
            self.script.extend(replies)

    def clear(self) -> None:
        with self._lock:
            self.script.clear()
            self.requests.clear()
            self.request_headers.clear()
            self.rejected.clear()

    def start(self) -> ScriptedLLMServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # As streaming servers do (asyncio's, under uvicorn, sets TCP_NODELAY): with
            # Nagle, a kept connection's small SSE writes waited on the client's delayed
            # ACK, 40 ms a call.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server.connections += 1

            def do_POST(self) -> None:
                server._handle(self)

            def do_GET(self) -> None:
                server._models_list(self)

        class Server(ThreadingHTTPServer):
            # socketserver's default backlog is 5: fifty runs calling at once had their
            # connections refused or their SYNs retried a second later.
            request_queue_size = 128

            def handle_error(self, request: Any, client_address: Any) -> None:
                # A client that hangs up (a cancelled stream, a timeout test) is normal here.
                pass

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # stop() waits for the serving thread's next look: socketserver's default of one
        # every 0.5 s cost a test 0.48 s on average (one file of 484 tests: 233 s).
        serve = {"poll_interval": STOP_POLL_S}
        threading.Thread(target=self._httpd.serve_forever, kwargs=serve, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if self.script:
                return self.script.popleft()
        if self.responder:
            return self.responder(body)
        return text_reply("OK")

    def _models_list(self, handler: BaseHTTPRequestHandler) -> None:
        """`GET /v1/models`, as the API lists models."""
        if self.models is None or not handler.path.rstrip("/").endswith("/models"):
            self._send_json(
                handler, 404, {"error": {"message": "not found", "type": "invalid_request_error"}}
            )
            return
        with self._lock:
            self.request_headers.append({k.lower(): v for k, v in handler.headers.items()})
        listed = [
            {"id": name, "object": "model", "created": 0, "owned_by": "toolchat-tests"}
            for name in self.models
        ]
        self._send_json(handler, 200, {"object": "list", "data": listed})

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length)
        if not handler.path.rstrip("/").endswith("/chat/completions"):
            self._send_json(
                handler, 404, {"error": {"message": "not found", "type": "invalid_request_error"}}
            )
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send_json(
                handler,
                400,
                {"error": {"message": "invalid JSON", "type": "invalid_request_error"}},
            )
            return
        problem = validate_request(body)
        with self._lock:
            self.requests.append(body)
            self.request_headers.append({k.lower(): v for k, v in handler.headers.items()})
            if problem:
                self.rejected.append((body, problem))
        if problem:
            error = {
                "message": problem,
                "type": "invalid_request_error",
                "param": "messages",
                "code": None,
            }
            self._send_json(handler, 400, {"error": error})
            return
        reply = self._next_reply(body)
        if reply.gate is not None:
            reply.gate.wait(timeout=60)
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.drop:
            reset_connection(handler)
            return
        if reply.status != 200:
            self._send_json(handler, reply.status, reply.error_body or {}, reply.headers)
            return
        if reply.raw is not None:
            self._send_raw(handler, reply)
        elif reply.unstreamed == "json":
            self._send_json(handler, 200, completion_of(body, reply))
        elif reply.unstreamed:
            page = b"<html><body><h1>Welcome to nginx!</h1></body></html>"
            handler.send_response(200)
            handler.send_header("Content-Type", reply.unstreamed)
            handler.send_header("Content-Length", str(len(page)))
            handler.end_headers()
            handler.wfile.write(page)
        elif body.get("stream"):
            self._stream(handler, body, reply)
        else:
            self._send_json(handler, 200, completion_of(body, reply))

    def _send_raw(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        assert reply.raw is not None
        streamed = reply.content_type == "text/event-stream"
        handler.send_response(200)
        handler.send_header("Content-Type", reply.content_type)
        if streamed:
            handler.send_header("Transfer-Encoding", "chunked")
        elif not reply.reset:
            handler.send_header("Content-Length", str(len(reply.raw)))
        handler.end_headers()
        try:
            if streamed and reply.raw:
                # One HTTP chunk per SSE event, as servers flush them.
                for data in re.findall(rb".*?\n\n|.+", reply.raw, re.DOTALL):
                    handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    handler.wfile.flush()
            elif reply.raw:
                handler.wfile.write(reply.raw)
                handler.wfile.flush()
            if reply.reset:
                reset_connection(handler)
                return
            if streamed:
                handler.wfile.write(b"0\r\n\r\n")
                handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True

    @staticmethod
    def _send_json(
        handler: BaseHTTPRequestHandler,
        status: int,
        payload: dict[str, Any],
        headers: dict[str, str] | None = None,
    ) -> None:
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(data)

    def _stream(self, handler: BaseHTTPRequestHandler, body: dict[str, Any], reply: Reply) -> None:
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body["model"],
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        chunks: list[dict[str, Any]] = [chunk({"role": "assistant", "content": ""})]
        if reply.reasoning:
            words = reply.reasoning.split(" ")
            for index, word in enumerate(words):
                text = word if index == len(words) - 1 else word + " "
                chunks.append(chunk({reply.reasoning_field: text}))
        if reply.content:
            words = reply.content.split(" ")
            for index, word in enumerate(words):
                text = word if index == len(words) - 1 else word + " "
                chunks.append(chunk({"content": text}))
                if reply.logprobs:
                    last = index == len(words) - 1
                    entries = reply.logprobs[index:] if last else reply.logprobs[index : index + 1]
                    chunks[-1]["choices"][0]["logprobs"] = {"content": entries}
        for index, call in enumerate(reply.tool_calls):
            arguments = call["function"]["arguments"]
            half = len(arguments) // 2
            # Tool calls arrive in pieces, as from the real API: id and name first.
            first = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": arguments[:half]},
            }
            chunks.append(chunk({"tool_calls": [first]}))
            chunks.append(
                chunk(
                    {"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]}
                )
            )
        chunks.append(chunk({}, finish_reason_of(reply)))
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append(
                {
                    **base,
                    "choices": [],
                    "usage": usage_of(reply),
                }
            )

        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.send_header("Cache-Control", "no-cache")
        handler.end_headers()

        def write(data: bytes) -> None:
            handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            handler.wfile.flush()

        with self._lock:
            self.open_streams += 1
        try:
            if reply.trickle_s:
                until = time.monotonic() + (reply.trickle_for_s or float("inf"))
                while time.monotonic() < until:
                    write(b": keep-alive\n\n")
                    time.sleep(reply.trickle_s)
            if reply.endless:
                self._endless(chunks, body, write, reply.chunk_delay_s)
                return
            for number, payload in enumerate(chunks):
                if reply.cut_after_chunks is not None and number >= reply.cut_after_chunks:
                    # Half a chunk, then the connection drops: what a dying proxy looks like.
                    handler.wfile.write(b'ff\r\ndata: {"trunc')
                    handler.wfile.flush()
                    handler.close_connection = True
                    handler.connection.shutdown(2)
                    return
                if number == reply.silent_after_chunks:
                    time.sleep(reply.silence_s)
                write(f"data: {json.dumps(payload)}\n\n".encode())
                if reply.chunk_delay_s:
                    time.sleep(reply.chunk_delay_s)
            write(b"data: [DONE]\n\n")
            if reply.hold_after_done_s:
                time.sleep(reply.hold_after_done_s)
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True
        finally:
            with self._lock:
                self.open_streams -= 1

    @staticmethod
    def _endless(
        chunks: list[dict[str, Any]],
        body: dict[str, Any],
        write: Callable[[bytes], None],
        delay_s: float,
    ) -> None:
        """Write the answer's pieces, then its last one again until the token limit, if any."""
        finish = next(
            number
            for number, chunk in enumerate(chunks)
            if chunk["choices"][0].get("finish_reason")
        )
        pieces, last = chunks[:finish], chunks[finish - 1]
        said = last["choices"][0]["delta"].get("content")
        if said:  # the last word again, after a space
            last = {**last, "choices": [{**last["choices"][0], "delta": {"content": " " + said}}]}
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        sent = 0
        while limit is None or sent < limit:
            payload = pieces[sent] if sent < len(pieces) else last
            write(f"data: {json.dumps(payload)}\n\n".encode())
            sent += 1
            time.sleep(delay_s)
        ended = {**last, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
        write(f"data: {json.dumps(ended)}\n\n".encode())
        write(b"data: [DONE]\n\n")
        write(b"")
