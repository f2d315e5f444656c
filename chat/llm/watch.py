"""The watch on a model call: what ends it from outside its stream.

The SDK's read timeout starts again at every byte, so a server that trickles
keep-alive comments could hold a call for ever. Every request the provider's
client sends goes through `WatchedTransport`: each request and each piece of
body it reads checks the current call's `Watch`, which ends the call when its
run stops wanting it (the `stop` event: a cancel, a take-over) or when a
deadline passes: one for the whole call, retries included
(LLM_CALL_DEADLINE_S), and one for each request and its stream
(LLM_ATTEMPT_DEADLINE_S). It also turns the read timeout of a request asked
without streaming into `Unanswered`: that answer comes whole, so the timeout
cannot tell a model still writing from a server that hung, and asking again
would make it write as much again. The exceptions are OpenAIErrors, which
the SDK passes on without a retry.

The transport also reads each error answer (a status of 400 or more), because
the SDK keeps only the last one: the server's words are kept on the watch
(`said`), so that a call whose last attempt got no answer at all can still
tell what the server said before; and an error that a retry will not change
(`chat.llm.limits.final_error`: a refusal) is marked `x-should-retry: false`,
which the SDK obeys.

And it reads a stream to its very end. The SDK stops reading at the `[DONE]`
event and closes the response, before the bytes that end the HTTP body:
httpcore then closes the connection rather than return it to the pool, so
every streamed call opened a new one, with its TCP and TLS handshakes
(openai/openai-python#95, #3580). When the SDK closes a stream that has
sent `[DONE]`, `WatchedStream` first reads the rest of the body.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import math
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import openai

from chat.llm.limits import final_error
from chat.telemetry.propagation import headers_inject


class Interrupted(openai.OpenAIError):
    """A watch ended the request. An OpenAIError: the SDK passes it on without a retry."""


class Stopped(Interrupted):
    """The run no longer wants the call (cancelled, taken over)."""


class Deadline(Interrupted):
    """A deadline passed: `setting` names it, `seconds` is its value."""

    setting = ""

    def __init__(self, message: str, seconds: float) -> None:
        super().__init__(message)
        self.seconds = seconds


class CallDeadline(Deadline):
    """The whole call, retries included, took longer than LLM_CALL_DEADLINE_S."""

    setting = "LLM_CALL_DEADLINE_S"


class AttemptDeadline(Deadline):
    """One request and its stream took longer than LLM_ATTEMPT_DEADLINE_S."""

    setting = "LLM_ATTEMPT_DEADLINE_S"


class Unanswered(Interrupted):
    """A request asked without streaming got no answer within the read timeout.

    Such an answer comes whole, so a model still writing sends nothing until it
    ends, as a server that hung: asked again, it would write as much again (and a
    one-slot local server would first finish the answer it was abandoned for).
    """

    def __init__(self, message: str, request: httpx2.Request) -> None:
        super().__init__(message)
        self.request = request


@dataclasses.dataclass
class Watch:
    """What ends a model call from outside its stream: a stop signal and two deadlines."""

    stop: threading.Event | None
    call_s: float
    attempt_s: float
    deadline: float = 0.0  # time.monotonic() values
    attempt_deadline: float = math.inf
    said: str = ""  # the message of the last error answer the server sent
    streamed: bool = True  # the request being sent asks for a stream

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.call_s

    def attempt(self) -> None:
        """A request is about to be sent (the first, or a retry)."""
        self.attempt_deadline = math.inf
        self.check()
        self.attempt_deadline = time.monotonic() + self.attempt_s

    def check(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise Stopped("the run stopped the model call")
        now = time.monotonic()
        if now >= self.deadline:
            raise CallDeadline(
                f"no complete answer within {self.call_s:g} s (LLM_CALL_DEADLINE_S)", self.call_s
            )
        if now >= self.attempt_deadline:
            raise AttemptDeadline(
                f"the answer took longer than {self.attempt_s:g} s (LLM_ATTEMPT_DEADLINE_S)",
                self.attempt_s,
            )


# A rate-limited request is asked again after the server's Retry-After when it is
# at most this long (as the SDK does), else after a short wait.
RETRY_AFTER_MAX_S = 60.0
RETRY_WAIT_S = 0.5


def retry_after_wait(watch: Watch, headers: httpx2.Headers) -> None:
    """Wait as the SDK would before a retry: the server's Retry-After, if it is short.

    The watch is checked as it waits: a stop or the call's deadline ends the wait.
    """
    wait = RETRY_WAIT_S
    try:
        if "retry-after-ms" in headers:
            wait = float(headers["retry-after-ms"]) / 1000
        elif "retry-after" in headers:
            wait = float(headers["retry-after"])
    except ValueError:
        pass
    if not 0 <= wait <= RETRY_AFTER_MAX_S:
        wait = RETRY_WAIT_S
    until = time.monotonic() + wait
    while (left := until - time.monotonic()) > 0:
        watch.check()
        time.sleep(min(left, 0.1))


_watch: contextvars.ContextVar[Watch | None] = contextvars.ContextVar(
    "toolchat_model_call_watch", default=None
)


@contextlib.contextmanager
def watching(watch: Watch) -> Iterator[None]:
    """Let the transport see `watch` while this thread sends or reads for the call.

    Set around each blocking step, never across a `yield` of the stream: the
    generator's caller must not run with the call's watch in its context.
    """
    reset = _watch.set(watch)
    try:
        yield
    finally:
        _watch.reset(reset)


class WatchedTransport(httpx2.BaseTransport):
    """The SDK's HTTP transport, with the current call's watch checked at every step."""

    def __init__(self, inner: httpx2.BaseTransport) -> None:
        self.inner = inner

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        watch = _watch.get()
        if watch is not None:
            watch.attempt()
        headers_inject(request.headers)  # the model call's span, when traces are on
        try:
            response = self.inner.handle_request(request)
        except httpx2.ReadTimeout as exc:
            if watch is None or watch.streamed:
                raise  # silence before a stream began: the SDK asks again
            read_s = (request.extensions.get("timeout") or {}).get("read") or 0.0
            raise Unanswered(f"no answer within {read_s:g} s (LLM_TIMEOUT_S)", request) from exc
        if watch is not None:
            response.stream = WatchedStream(response.stream, watch)
            if response.status_code >= 400:
                response = _error_read(request, response, watch)
        return response

    def close(self) -> None:
        self.inner.close()


def _rest_read(pieces: Iterator[bytes], watch: Watch) -> None:
    """Read what the body still holds after `[DONE]` (normally nothing but its end).

    Reading the end is what lets httpcore keep the connection. The answer is
    complete and already passed on: a server that goes on sending (keep-alive
    comments) is read for AFTER_DONE_S at most, a broken connection or a watch
    that ends the call stops the read, and the connection is then closed, as
    the SDK would have.
    """
    until = time.monotonic() + AFTER_DONE_S
    read = 0
    try:
        for piece in pieces:
            watch.check()
            read += len(piece)
            if read > AFTER_DONE_MAX_BYTES or time.monotonic() > until:
                return
    except (httpx2.HTTPError, Interrupted):
        pass


# An error body longer than this is not an API error object: it is left to the SDK unread.
ERROR_BODY_MAX = 64 * 1024


def _error_read(
    request: httpx2.Request, response: httpx2.Response, watch: Watch
) -> httpx2.Response:
    """An error answer, read whole: its words kept on the watch, a refusal marked final."""
    length = response.headers.get("content-length", "")
    if length and (not length.isdigit() or int(length) > ERROR_BODY_MAX):
        return response
    stream = response.stream
    assert isinstance(stream, httpx2.SyncByteStream)
    body = b"".join(stream)
    stream.close()
    headers = response.headers.copy()
    error: Any = None
    try:
        data = json.loads(body)
        error = data.get("error", data) if isinstance(data, dict) else None
    except ValueError:
        pass
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        watch.said = f"HTTP {response.status_code}: {error['message']}"[:500]
        if response.status_code >= 500 and final_error(response.status_code, error):
            headers["x-should-retry"] = "false"
    elif body.strip():
        watch.said = f"HTTP {response.status_code}: " + body[:200].decode("utf-8", "replace")
    return httpx2.Response(
        response.status_code,
        headers=headers,
        content=body,
        extensions=response.extensions,
        request=request,
    )


# The SSE event that ends an OpenAI stream, at the start of a line. Inside an
# event's JSON a line break is written `\n`, so a model's text cannot match.
_DONE_EVENT = re.compile(rb"[\r\n]data: ?\[DONE\]")
# What a stream may still send after `[DONE]`, and for how long, that is read
# to reuse its connection; beyond either, the connection is closed, as the SDK
# would have.
AFTER_DONE_MAX_BYTES = 64 * 1024
AFTER_DONE_S = 0.5


class WatchedStream(httpx2.SyncByteStream):
    """A response body that checks its call's watch at each piece (an SSE comment too)."""

    def __init__(self, inner: Any, watch: Watch) -> None:
        self.inner = inner
        self.watch = watch
        self.pieces: Iterator[bytes] | None = None
        self.done = False  # `[DONE]` came

    def __iter__(self) -> Iterator[bytes]:
        self.pieces = iter(self.inner)
        # The end of what came before: `[DONE]` may come in two pieces, and the
        # body's start is a line's start.
        tail = b"\n"
        for piece in self.pieces:
            self.watch.check()
            seen = tail + piece
            if _DONE_EVENT.search(seen):
                self.done = True
            tail = seen[-16:]
            yield piece

    def close(self) -> None:
        # The SDK closes the response once it has read `[DONE]`, with the body's
        # end still unread: read it, so that the connection can be kept.
        if self.done and self.pieces is not None:
            _rest_read(self.pieces, self.watch)
        self.inner.close()
