"""The OpenAI-compatible provider: the only module that imports `openai`.

The SDK's own retries are off (`max_retries=0`): this module retries, so that
one count (LLM_MAX_RETRIES) bounds every attempt, a stream cut mid-answer is
retried like a connection error, and Celery never multiplies the attempts (the
turn engine does not retry a model call that failed here).
"""

from __future__ import annotations

import email.utils
import logging
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import openai

from chat.llm.base import (
    ChatRequest,
    Completion,
    Done,
    ProviderError,
    StreamEvent,
    StreamRestart,
    TextDelta,
    ToolCall,
)

logger = logging.getLogger(__name__)

RETRYABLE_STATUSES = frozenset({408, 409, 429})
MAX_BACKOFF_S = 20.0
MAX_RETRY_AFTER_S = 60.0


class StreamCut(Exception):
    """The stream ended before the model said it was finished."""


@dataclass
class _Assembly:
    """Tool-call deltas, gathered by index until the stream ends."""

    content: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    finish_reason: str = ""
    model: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    first_token_ms: int | None = None

    def tool_calls(self) -> list[ToolCall]:
        return [
            ToolCall(id=call["id"], name=call["name"], arguments=call["arguments"])
            for _, call in sorted(self.calls.items())
        ]


def retry_after_seconds(headers: Any) -> float | None:
    """Read Retry-After (seconds or an HTTP date) or retry-after-ms; None if absent or unreadable."""
    if not headers:
        return None
    seconds: float | None = None
    try:
        if value := headers.get("retry-after-ms"):
            seconds = float(value) / 1000
        elif value := headers.get("retry-after"):
            try:
                seconds = float(value)
            except ValueError:
                parsed = email.utils.parsedate_to_datetime(value)
                seconds = parsed.timestamp() - time.time()
    except (ValueError, TypeError, OverflowError):
        return None  # a header we cannot read is as good as none: use our backoff
    if seconds is None or not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


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
        backoff_base_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = openai.OpenAI(
            api_key=api_key or "not-needed",
            base_url=base_url or None,
            timeout=openai.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            max_retries=0,
        )
        self.max_attempts = max(1, max_retries + 1)
        self.backoff_base_s = backoff_base_s
        self.sleep = sleep

    def stream(self, request: ChatRequest) -> Iterator[StreamEvent]:
        """Stream one completion, retrying transient failures up to the attempt cap."""
        started = time.monotonic()
        for attempt in range(1, self.max_attempts + 1):
            try:
                assembly = _Assembly()
                for text in self._attempt(request, assembly, started):
                    yield TextDelta(text)
            except Exception as exc:
                retryable, delay, reason, status = self._classify(exc)
                if not retryable or attempt == self.max_attempts:
                    message = self._describe(exc, reason, attempt)
                    raise ProviderError(message, status=status, attempts=attempt) from exc
                wait = delay if delay is not None else self._backoff(attempt)
                logger.warning(
                    "model call failed (attempt %d/%d): %s; retrying in %.2fs",
                    attempt,
                    self.max_attempts,
                    reason,
                    wait,
                )
                self.sleep(wait)
                if assembly.content or assembly.calls:
                    yield StreamRestart(attempt=attempt + 1, reason=reason)
                continue
            yield Done(
                Completion(
                    content="".join(assembly.content) or None,
                    tool_calls=assembly.tool_calls(),
                    finish_reason=assembly.finish_reason,
                    model=assembly.model or request.model,
                    prompt_tokens=assembly.prompt_tokens,
                    completion_tokens=assembly.completion_tokens,
                    first_token_ms=assembly.first_token_ms,
                    latency_ms=int((time.monotonic() - started) * 1000),
                    attempts=attempt,
                )
            )
            return

    def _attempt(self, request: ChatRequest, assembly: _Assembly, started: float) -> Iterator[str]:
        kwargs: dict[str, Any] = {
            "model": request.model,
            "messages": request.messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            kwargs["tools"] = request.tools
            if request.tool_choice:
                kwargs["tool_choice"] = request.tool_choice
        if request.response_format:
            kwargs["response_format"] = request.response_format
        if request.max_tokens:
            kwargs["max_completion_tokens"] = request.max_tokens
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        stream = self.client.chat.completions.create(**kwargs)
        try:
            yield from self._read(stream, assembly, started)
        except openai.APIError:
            raise
        except Exception as exc:
            # Whatever the transport raised once the answer had begun: the stream broke.
            raise StreamCut(f"the stream broke mid-answer ({type(exc).__name__}: {exc})") from exc
        finally:
            stream.close()
        if not assembly.finish_reason:
            raise StreamCut("the stream ended before the model finished its answer")

    def _read(self, stream: Any, assembly: _Assembly, started: float) -> Iterator[str]:
        """Turn chunks into text deltas, gathering tool calls, usage and the finish reason."""
        for chunk in stream:
            assembly.model = chunk.model or assembly.model
            if chunk.usage:
                assembly.prompt_tokens = chunk.usage.prompt_tokens
                assembly.completion_tokens = chunk.usage.completion_tokens
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    self._first_token(assembly, started)
                    assembly.content.append(delta.content)
                    yield delta.content
                for call_delta in delta.tool_calls or []:
                    self._first_token(assembly, started)
                    call = assembly.calls.setdefault(
                        call_delta.index, {"id": "", "name": "", "arguments": ""}
                    )
                    if call_delta.id:
                        call["id"] = call_delta.id
                    if call_delta.function and call_delta.function.name:
                        call["name"] += call_delta.function.name
                    if call_delta.function and call_delta.function.arguments:
                        call["arguments"] += call_delta.function.arguments
                if choice.finish_reason:
                    assembly.finish_reason = choice.finish_reason

    @staticmethod
    def _first_token(assembly: _Assembly, started: float) -> None:
        if assembly.first_token_ms is None:
            assembly.first_token_ms = int((time.monotonic() - started) * 1000)

    def _backoff(self, attempt: int) -> float:
        base: float = min(MAX_BACKOFF_S, self.backoff_base_s * 2 ** (attempt - 1))
        return base * (0.5 + random.random() / 2)

    @staticmethod
    def _classify(exc: BaseException) -> tuple[bool, float | None, str, int | None]:
        """(retryable, server-requested delay, short reason, HTTP status)."""
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            retryable = status in RETRYABLE_STATUSES or status >= 500
            delay = retry_after_seconds(exc.response.headers) if retryable else None
            return retryable, delay, f"HTTP {status}", status
        if isinstance(exc, openai.APITimeoutError):
            return True, None, "timed out", None
        if isinstance(exc, openai.APIConnectionError):
            return True, None, "connection error", None
        if isinstance(exc, StreamCut | openai.APIError):
            return True, None, "stream cut mid-answer", None
        return False, None, type(exc).__name__, None

    @staticmethod
    def _describe(exc: BaseException, reason: str, attempts: int) -> str:
        detail = str(exc)
        if isinstance(exc, openai.APIStatusError):
            body = exc.body if isinstance(exc.body, dict) else {}
            error = body.get("error", body) if isinstance(body, dict) else {}
            detail = (error.get("message") if isinstance(error, dict) else None) or exc.message
        tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
        return f"The model call failed ({reason}) after {tries}: {detail}"
