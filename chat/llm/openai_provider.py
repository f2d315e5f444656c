"""The OpenAI-compatible provider: the only module that imports `openai`.

The SDK does the HTTP work: one client (one connection pool) per process and
settings, the retries of a failed request (LLM_MAX_RETRIES, with its backoff
and the server's Retry-After), and the assembly of streamed tool-call deltas
(`ChatCompletionStreamState`). This module adds what the SDK lacks: a stream
cut mid-answer is asked again, after a `StreamRestart`, from the same budget
of LLM_MAX_RETRIES + 1 requests, so that one count bounds every request of a
call. Celery never multiplies it: the turn engine does not retry a model call
that failed here.

The SDK's read timeout starts again at each byte, so a server that trickles
keep-alive comments could hold a call for ever. Every request therefore goes
through a watched transport (`WatchedTransport`): each request it sends and
each piece of body it reads checks the call's watch, which ends the call when
its run stops wanting it (a cancel, a take-over: the `stop` event) or when a
deadline passes: `LLM_CALL_DEADLINE_S` for the whole call, retries included,
and `LLM_ATTEMPT_DEADLINE_S` for one request and its stream (a late stream is
cut and asked again, within the call's deadline). A server that ignores
`stream=true` and answers one JSON completion is read as that completion.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, cast

import httpx2
import openai
from django.core.signals import setting_changed
from django.dispatch import receiver
from openai.lib.streaming.chat import (
    ChatCompletionStreamState,
    ContentDeltaEvent,
)
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from chat.llm.base import (
    ChatRequest,
    Completion,
    Done,
    ProviderError,
    ProviderStopped,
    StreamEvent,
    StreamRestart,
    TextDelta,
    ToolCall,
)
from chat.llm.watch import (
    AttemptDeadline,
    CallDeadline,
    Interrupted,
    Stopped,
    Watch,
    WatchedTransport,
    watching,
)

logger = logging.getLogger(__name__)

# The settings that shape a client; a change to any of them (in tests) drops the cache.
CLIENT_SETTINGS = frozenset(
    {"OPENAI_API_KEY", "OPENAI_BASE_URL", "LLM_TIMEOUT_S", "LLM_MAX_RETRIES"}
)
# How much of a body that is not an event stream an error message quotes.
QUOTED_CHARS = 200
CUT = "stream cut mid-answer"

_ClientKey = tuple[int, str, str | None, float, int]
_clients: dict[_ClientKey, openai.OpenAI] = {}
_clients_lock = threading.Lock()


def openai_client(
    *, api_key: str, base_url: str | None, timeout_s: float, max_retries: int
) -> openai.OpenAI:
    """The client for these settings, made once per process: one connection pool for all calls."""
    # The pid is part of the key: a client made before a fork (Celery prefork)
    # holds the parent's sockets, which a child must not read from.
    key = (os.getpid(), api_key, base_url, timeout_s, max_retries)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = openai.OpenAI(
                api_key=api_key or "not-needed",
                base_url=base_url or None,
                timeout=openai.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
                max_retries=max_retries,
                http_client=openai.DefaultHttpxClient(
                    transport=WatchedTransport(
                        httpx2.HTTPTransport(limits=openai.DEFAULT_CONNECTION_LIMITS)
                    )
                ),
            )
        return client


def openai_clients_reset() -> None:
    """Drop the cached clients; each closes its pool when its last call lets go of it."""
    with _clients_lock:
        _clients.clear()


@receiver(setting_changed)
def _client_settings_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in CLIENT_SETTINGS:
        openai_clients_reset()


def _after_fork_in_child() -> None:
    # Another thread of the parent may have held the lock at the fork: the child's copy
    # would then stay locked for ever.
    global _clients_lock
    _clients_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


class StreamCut(Exception):
    """The stream ended, or broke, before the model said it was finished."""


class OpenAIProvider:
    """Streams chat completions from any OpenAI-compatible endpoint."""

    name = "openai"

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        call_deadline_s: float = 600.0,
        attempt_deadline_s: float = 300.0,
    ) -> None:
        max_retries = max(0, max_retries)
        self.client = openai_client(
            api_key=api_key, base_url=base_url, timeout_s=timeout_s, max_retries=max_retries
        )
        self.max_attempts = max_retries + 1
        self.call_deadline_s = call_deadline_s
        self.attempt_deadline_s = attempt_deadline_s

    def stream(
        self, request: ChatRequest, *, stop: threading.Event | None = None
    ) -> Iterator[StreamEvent]:
        """Stream one completion; the SDK retries failed requests, this retries cut streams."""
        started = time.monotonic()
        watch = Watch(stop, self.call_deadline_s, self.attempt_deadline_s)
        attempts = 0
        while True:
            client = self.client
            if attempts:  # a cut stream: what is left of the budget is the SDK's to retry with
                client = client.with_options(max_retries=self.max_attempts - attempts - 1)
            try:
                with watching(watch):
                    chunks = client.chat.completions.create(
                        model=request.model,
                        # The history codec (chat/history.py) writes messages in the API's shape.
                        messages=cast("list[ChatCompletionMessageParam]", request.messages),
                        stream=True,
                        stream_options={"include_usage": True},
                        **_optional_arguments(request),
                    )
            except openai.OpenAIError as exc:
                request_headers = exc.request.headers if isinstance(exc, openai.APIError) else {}
                attempts += _requests_sent(request_headers)
                raise _failed(exc, attempts) from exc
            attempts += _requests_sent(chunks.response.request.headers)
            kind = chunks.response.headers.get("content-type", "").partition(";")[0].strip()
            if kind != "text/event-stream":
                # A server that ignored `stream=true`: one JSON completion, or not an answer.
                with chunks:
                    yield from _unstreamed(chunks.response, kind, request, started, attempts)
                return
            read = _Read()
            try:
                yield from _chunks_read(chunks, read, started)
                if not read.finish_reason:
                    raise StreamCut("the stream ended before the model finished its answer")
            except (Stopped, CallDeadline) as exc:
                raise _ended(exc, attempts) from exc
            except Exception as exc:
                cut = _cut_reason(exc)
                if attempts >= self.max_attempts:
                    raise ProviderError(
                        _failure_message(CUT, cut, attempts), attempts=attempts
                    ) from exc
                # Asked again at once: the server answered a moment ago, only the stream broke.
                logger.warning(
                    "model stream cut (attempt %d/%d): %s; asking again",
                    attempts,
                    self.max_attempts,
                    cut,
                )
                if read.first_token_ms is not None:
                    yield StreamRestart(attempt=attempts + 1, reason=CUT)
                continue
            yield Done(
                _completion(
                    read.state, request, read.finish_reason, read.first_token_ms, started, attempts
                )
            )
            return


@dataclasses.dataclass
class _Read:
    """What one attempt's stream gave so far: the SDK's accumulated state, the first token's time."""

    state: ChatCompletionStreamState[object] = dataclasses.field(
        default_factory=ChatCompletionStreamState
    )
    first_token_ms: int | None = None
    finish_reason: str = ""


def _chunks_read(chunks: Any, read: _Read, started: float) -> Iterator[StreamEvent]:
    """Yield the text of one attempt's chunks; `read` keeps the rest, as far as it got."""
    with chunks:
        for chunk in chunks:
            if chunk.object != "chat.completion.chunk":
                continue  # not a chunk (Azure's content-filter notes); as .stream() does
            if read.first_token_ms is None and any(
                c.delta.content or c.delta.tool_calls for c in chunk.choices
            ):
                read.first_token_ms = int((time.monotonic() - started) * 1000)
            for event in read.state.handle_chunk(chunk):
                if isinstance(event, ContentDeltaEvent) and event.delta:
                    yield TextDelta(event.delta)
            read.finish_reason = _finish_reason(read.state) or read.finish_reason


def _cut_reason(exc: Exception) -> str:
    """Why an attempt's stream broke off, as the failure (or the retry's log) says it."""
    if isinstance(exc, StreamCut | AttemptDeadline):
        return str(exc)
    return f"the stream broke mid-answer ({type(exc).__name__}: {exc})"


def _ended(exc: Interrupted, attempts: int) -> Exception:
    """The error for a call its watch ended: a stop for the run, or a deadline's failure."""
    if isinstance(exc, Stopped):
        return ProviderStopped(str(exc))
    return ProviderError(_failure_message("deadline", str(exc), attempts), attempts=attempts)


def _unstreamed(
    response: httpx2.Response,
    kind: str,
    request: ChatRequest,
    started: float,
    attempts: int,
) -> Iterator[StreamEvent]:
    """The answer of a server that did not stream: a JSON completion is read as one."""
    body = response.read()
    completion: ChatCompletion | None = None
    if kind == "application/json" or kind.endswith("+json"):
        try:
            completion = ChatCompletion.model_validate(json.loads(body))
        except ValueError:
            completion = None
    if completion is None or not completion.choices:
        what = f"a {kind} body" if kind else "a body without a Content-Type"
        quoted = body[:QUOTED_CHARS].decode("utf-8", "replace").strip()
        raise ProviderError(
            _failure_message(
                "not a stream",
                f"asked for an event stream (stream=true), the server sent {what}: {quoted!r}",
                attempts,
            ),
            attempts=attempts,
        )
    choice = completion.choices[0]
    latency_ms = int((time.monotonic() - started) * 1000)
    if choice.message.content:
        yield TextDelta(choice.message.content)
    yield Done(
        Completion(
            content=choice.message.content or None,
            tool_calls=[
                ToolCall(
                    id=call.id or "",
                    name=call.function.name or "",
                    arguments=call.function.arguments or "",
                )
                for call in choice.message.tool_calls or []
                if call.type == "function"
            ],
            finish_reason=choice.finish_reason,
            model=completion.model or request.model,
            prompt_tokens=completion.usage.prompt_tokens if completion.usage else None,
            completion_tokens=completion.usage.completion_tokens if completion.usage else None,
            first_token_ms=latency_ms,
            latency_ms=latency_ms,
            attempts=attempts,
        )
    )


def _optional_arguments(request: ChatRequest) -> dict[str, Any]:
    """The request's optional fields, each sent only when set (tool_choice only with tools)."""
    arguments: dict[str, Any] = {}
    if request.tools:
        arguments["tools"] = request.tools
        if request.tool_choice:
            arguments["tool_choice"] = request.tool_choice
    if request.response_format:
        arguments["response_format"] = request.response_format
    if request.max_tokens:
        arguments["max_completion_tokens"] = request.max_tokens
    if request.temperature is not None:
        arguments["temperature"] = request.temperature
    return arguments


def _requests_sent(request_headers: Mapping[str, str]) -> int:
    """How many requests one SDK call sent: the SDK numbers its retries in a request header."""
    try:
        return int(request_headers.get("x-stainless-retry-count", "0")) + 1
    except ValueError:
        return 1


def _failed(exc: openai.OpenAIError, attempts: int) -> Exception:
    """The ProviderError for a request the SDK gave up on, with the server's own words."""
    if isinstance(exc, Interrupted):
        return _ended(exc, attempts)
    status: int | None = None
    detail = str(exc)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        reason = f"HTTP {status}"
        body = exc.body if isinstance(exc.body, dict) else {}
        error = body.get("error", body)
        detail = (error.get("message") if isinstance(error, dict) else None) or exc.message
    elif isinstance(exc, openai.APITimeoutError):
        reason = "timed out"
    elif isinstance(exc, openai.APIConnectionError):
        reason = "connection error"
    else:
        reason = type(exc).__name__
    return ProviderError(
        _failure_message(reason, detail, attempts), status=status, attempts=attempts
    )


def _failure_message(reason: str, detail: str, attempts: int) -> str:
    tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
    return f"The model call failed ({reason}) after {tries}: {detail}"


def _finish_reason(state: ChatCompletionStreamState[object]) -> str:
    choices = state.current_completion_snapshot.choices
    # Typed as always set, but it is None in the snapshot until the finishing chunk.
    reason: str | None = choices[0].finish_reason if choices else None
    return reason or ""


def _completion(
    state: ChatCompletionStreamState[object],
    request: ChatRequest,
    finish_reason: str,
    first_token_ms: int | None,
    started: float,
    attempts: int,
) -> Completion:
    """The assembled answer of a finished stream."""
    snapshot = state.current_completion_snapshot
    message = snapshot.choices[0].message
    return Completion(
        content=message.content or None,
        tool_calls=[
            # Fields a server left out are None in the snapshot; a ToolCall holds strings.
            ToolCall(
                id=call.id or "",
                name=call.function.name or "",
                arguments=call.function.arguments or "",
            )
            for call in message.tool_calls or []
        ],
        finish_reason=finish_reason,
        model=snapshot.model or request.model,
        prompt_tokens=snapshot.usage.prompt_tokens if snapshot.usage else None,
        completion_tokens=snapshot.usage.completion_tokens if snapshot.usage else None,
        first_token_ms=first_token_ms,
        latency_ms=int((time.monotonic() - started) * 1000),
        attempts=attempts,
    )
