"""What the scripted model server (tests/llm_server.py) answers, and what it refuses.

A `Reply` is one scripted answer (its text or tool calls, its timing, its faults);
`text_reply`, `tool_calls_reply`, `error_reply` and `raw_reply` build the usual
ones. `validate_request` says why the real API would refuse a request.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any


@dataclass
class Reply:
    """One scripted answer to one request."""

    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    error_body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # before the first byte
    # Wait until this is set (at most a minute) before the first byte: a model that
    # holds every call open until the test lets it answer.
    gate: threading.Event | None = None
    chunk_delay_s: float = 0.0  # between streamed chunks
    cut_after_chunks: int | None = None  # drop the connection mid-stream
    # Go silent (nothing sent, the connection held) for `silence_s` after this many
    # chunks, then go on: a server that stalls mid-answer.
    silent_after_chunks: int | None = None
    silence_s: float = 5.0
    # SSE comments (": keep-alive") every `trickle_s` before the first chunk, for
    # `trickle_for_s` (None: until the client goes away): what resets a read timeout.
    trickle_s: float = 0.0
    trickle_for_s: float | None = None
    # Answer `stream=true` as if it were not asked: "json" (one completion) or a
    # body of another Content-Type, such as "text/html".
    unstreamed: str | None = None
    # What a reasoning model writes before its answer, streamed first, under this name:
    # "reasoning_content" (DeepSeek, vLLM) or "reasoning" (OpenRouter, Ollama).
    reasoning: str | None = None
    reasoning_field: str = "reasoning_content"
    prompt_tokens: int = 11
    completion_tokens: int = 7
    # Of the prompt's tokens, those reported as cached (`prompt_tokens_details`).
    cached_tokens: int | None = None
    finish_reason: str | None = None
    # Send these bytes as the whole body (status 200, `content_type`), whatever was
    # asked: a recorded response replayed byte for byte, or a server's odd answer.
    raw: bytes | None = None
    content_type: str = "text/event-stream"
    # After the body (or, with `raw=b""`, right after the headers) reset the
    # connection instead of ending the response: a server that died mid-answer.
    reset: bool = False
    # Close the connection with a TCP reset before any response: a server whose
    # handler raised before its first byte (llama-cpp-python refusing to stream tools).
    drop: bool = False
    # Wait this long after `data: [DONE]` before the bytes that end the body.
    hold_after_done_s: float = 0.0
    # A model that never stops writing: after its text (or its calls' first pieces) the
    # stream sends its last piece again and again, `chunk_delay_s` apart, until the
    # client goes away, or, when the request set a token limit, until that many pieces
    # came (one a token), ending with `finish_reason` "length" as a server that heeds it.
    endless: bool = False
    # Token log probabilities (OpenAI's `logprobs.content` entries) sent with the answer:
    # whole in a completion, one a text chunk in a stream (the rest with the last).
    logprobs: list[dict[str, Any]] | None = None


def text_reply(content: str, **kwargs: Any) -> Reply:
    """A plain text answer."""
    return Reply(content=content, **kwargs)


def tool_calls_reply(calls: list[tuple[str, str] | tuple[str, str, str]], **kwargs: Any) -> Reply:
    """An answer that calls tools: (name, arguments_json[, id])."""
    tool_calls = []
    for call in calls:
        name, arguments = call[0], call[1]
        call_id = call[2] if len(call) > 2 else f"call_{uuid.uuid4().hex[:24]}"  # type: ignore[misc]
        tool_calls.append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        )
    return Reply(tool_calls=tool_calls, **kwargs)


def error_reply(status: int, message: str = "scripted error", **kwargs: Any) -> Reply:
    """An HTTP error in the OpenAI error shape."""
    body = {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
    return Reply(status=status, error_body=body, **kwargs)


def raw_reply(raw: bytes, *, content_type: str = "text/event-stream", **kwargs: Any) -> Reply:
    """An answer of exactly these bytes (chunked when it is an event stream)."""
    return Reply(raw=raw, content_type=content_type, **kwargs)


def sse(*events: dict[str, Any] | str) -> bytes:
    """An event stream of these `data:` payloads (a str is sent as it is, like "[DONE]")."""
    return b"".join(
        f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n".encode()
        for event in events
    )


def validate_request(body: dict[str, Any]) -> str | None:
    """Return why the real API would refuse this request, or None."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    if "tool_choice" in body and "tools" not in body:
        return "'tool_choice' is only allowed when 'tools' are specified"
    if "stream_options" in body and not body.get("stream"):
        return "'stream_options' is only allowed when 'stream' is true"
    pending: list[str] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in {"system", "developer", "user", "assistant", "tool"}:
            return f"messages[{index}].role: invalid role {role!r}"
        if pending and role != "tool":
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(pending)} (messages[{index}])"
            )
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                return (
                    f"messages[{index}]: messages with role 'tool' must be a response to a "
                    "preceding message with 'tool_calls'."
                )
            pending.remove(call_id)
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            if message.get("content") is None and not calls:
                return (
                    f"messages[{index}]: assistant content must be set when there are no tool_calls"
                )
            for call in calls:
                if not call.get("id") or call.get("type") != "function":
                    return (
                        f"messages[{index}].tool_calls: each call needs an id and type 'function'"
                    )
                arguments = call.get("function", {}).get("arguments")
                if not isinstance(arguments, str):
                    return f"messages[{index}].tool_calls: arguments must be a string"
            pending = [call["id"] for call in calls]
        elif message.get("content") is None:
            return f"messages[{index}].content: {role} messages need content"
    if pending:
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages responding "
            f"to each 'tool_call_id'. Missing: {', '.join(pending)}"
        )
    return None


def finish_reason_of(reply: Reply) -> str:
    """The answer's `finish_reason`: as scripted, else by what it holds."""
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def completion_of(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    """The unstreamed Chat Completions answer to `body`."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning:
        message[reply.reasoning_field] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
    choice = {"index": 0, "message": message, "finish_reason": finish_reason_of(reply)}
    if reply.logprobs is not None:
        choice["logprobs"] = {"content": reply.logprobs, "refusal": None}
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body["model"],
        "choices": [choice],
        "usage": usage_of(reply),
    }


def usage_of(reply: Reply) -> dict[str, Any]:
    """The `usage` object the answer reports."""
    usage: dict[str, Any] = {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }
    if reply.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
    return usage


def reset_connection(handler: BaseHTTPRequestHandler) -> None:
    """Close the request's connection with a TCP reset, not a clean FIN."""
    handler.close_connection = True
    linger = struct.pack("ii", 1, 0)
    handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
    handler.connection.close()
