"""A model server's answer as a Completion: a JSON body read leniently, or a stream's assembly.

A call (chat/llm/openai_call.py) makes the requests; these read
what came back, whatever the server's dialect (chat/llm/lenient.py), into
one Completion with the call's timing, attempts and notes, and turn a body
that is no completion into a readable failure.
"""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

import httpx2

from chat.llm.base import ChatRequest, Completion, ProviderError, ToolCall
from chat.llm.failures import ended, failure_message
from chat.llm.lenient import (
    arguments_text,
    call_id,
    content_read,
    logprobs_read,
    reasoning_read,
    tool_calls_read,
    usage_read,
)
from chat.llm.limits import error_status
from chat.llm.stream_read import StreamRead
from chat.llm.watch import CallDeadline, Stopped

# How much of a body that is not an event stream an error message quotes.
QUOTED_CHARS = 200


class Asking(Protocol):
    """What is known of the call an answer belongs to."""

    request: ChatRequest
    started: float  # time.monotonic() at the call's start
    attempts: int
    notes: list[str]


def completion_read(asked: Asking, response: httpx2.Response, kind: str) -> Completion:
    """A JSON completion, read leniently; anything else is a readable failure."""
    body = _body(asked, response)
    data = _json_or_none(body, kind)
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(choices, list) or not choices:
        raise _not_a_completion(asked, body, kind)
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message")
    message = message if isinstance(message, dict) else {}
    calls = tool_calls_read(message.get("tool_calls"), response_id=str(data.get("id") or ""))
    usage = usage_read(data)
    latency_ms = int((time.monotonic() - asked.started) * 1000)
    return Completion(
        content=content_read(message) or None,
        tool_calls=calls,
        finish_reason=str(choice.get("finish_reason") or ""),
        model=str(data.get("model") or asked.request.model),
        prompt_tokens=usage.prompt,
        completion_tokens=usage.completion,
        cached_tokens=usage.cached,
        first_token_ms=latency_ms,
        latency_ms=latency_ms,
        attempts=asked.attempts,
        reasoning=reasoning_read(message) or None,
        note="; ".join(asked.notes),
        response_id=str(data.get("id") or ""),
        logprobs=logprobs_read(choice.get("logprobs")) or None,
    )


def _body(asked: Asking, response: httpx2.Response) -> bytes:
    """The response's whole body; a broken read is a readable failure."""
    try:
        return response.read()
    except (Stopped, CallDeadline) as exc:
        raise ended(exc, asked.attempts) from exc
    except httpx2.HTTPError as exc:
        raise ProviderError(
            failure_message("connection error", str(exc), asked.attempts),
            attempts=asked.attempts,
        ) from exc


def _not_a_completion(asked: Asking, body: bytes, kind: str) -> ProviderError:
    """The failure for a body that is no completion: the server's error, or what it sent."""
    data = _json_or_none(body, kind)
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        error = data["error"]
        return ProviderError(
            failure_message(
                "the server's error", str(error.get("message") or error), asked.attempts
            ),
            status=error_status(error),
            attempts=asked.attempts,
        )
    what = f"a {kind} body" if kind else "a body without a Content-Type"
    quoted = body[:QUOTED_CHARS].decode("utf-8", "replace").strip()
    return ProviderError(
        failure_message(
            "not a stream",
            f"asked for an event stream (stream=true), the server sent {what}: {quoted!r}",
            asked.attempts,
        ),
        attempts=asked.attempts,
    )


def stream_completion(
    asked: Asking, read: StreamRead, *, finish_reason: str | None = None
) -> Completion | None:
    """The answer of a stream that ended cleanly; None when it said nothing and never finished.

    A stream that ends (`[DONE]`, or the connection closed cleanly) without a
    `finish_reason` keeps what it said; `finish_reason` given is the one kept
    instead of the stream's (a stream cut at a deadline ends for "length").
    """
    state = read.state
    if finish_reason is None:
        finish_reason = read.finish_reason
    if not state.started:  # not one chunk came
        return None
    answer = state.answer
    content = answer.text if answer is not None else None
    calls = []
    for index, call in enumerate(answer.calls if answer is not None else []):
        # Fields a server left out are None; a ToolCall holds strings.
        name = call.name or ""
        arguments = arguments_text(call.arguments)
        calls.append(
            ToolCall(
                id=call_id(
                    call.id,
                    response_id=state.id,
                    index=index,
                    name=name,
                    arguments=arguments,
                ),
                name=name,
                arguments=arguments,
            )
        )
    if not finish_reason and not content and not calls:
        return None
    return Completion(
        content=content or None,
        tool_calls=calls,
        finish_reason=finish_reason,
        model=state.model or asked.request.model,
        prompt_tokens=read.usage.prompt,
        completion_tokens=read.usage.completion,
        cached_tokens=read.usage.cached,
        first_token_ms=read.first_token_ms,
        latency_ms=int((time.monotonic() - asked.started) * 1000),
        attempts=asked.attempts,
        reasoning="".join(read.reasoning) or None,
        note="; ".join(asked.notes),
        response_id=state.id,
        logprobs=read.logprobs or None,
    )


def _json_or_none(body: bytes, kind: str) -> Any:
    """The body decoded, when it says it is JSON and is."""
    if kind == "application/json" or kind.endswith("+json"):
        try:
            return json.loads(body)
        except ValueError:
            return None
    return None
