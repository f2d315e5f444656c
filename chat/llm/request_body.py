"""The body of one request to an OpenAI-compatible server, as that server takes it.

chat/llm/openai_call.py sends it and learns from the answer what a server
refuses; this module only builds what is sent: the optional fields a request
sets, renamed or left out as the server's learned limits say
(chat/llm/limits.py), and the history and tools, which go into the body as
they are rather than through the SDK's transform.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from chat.llm.base import ChatRequest
from chat.llm.limits import ServerLimits, images_left_out
from chat.llm.tool_bounds import tools_for_model

# Options sent that the SDK's `create` does not take (the open servers' samplers): they go
# in its `extra_body`.
_NOT_THE_SDKS = frozenset({"top_k", "min_p", "repetition_penalty"})


@dataclasses.dataclass(frozen=True)
class Known:
    """What a provider's configuration says its server cannot do (docs/providers.md)."""

    stream: bool = True  # False: no request is streamed
    stream_tools: bool = True  # False: a request that offers tools is not streamed
    stream_usage: bool = True  # False: `stream_options` is never sent
    parallel_tool_calls: bool | None = None  # sent with the tools when set
    # The token limit sent when a call sets none (LLM_LOCAL_MAX_TOKENS, to a local server).
    max_tokens: int | None = None


@dataclasses.dataclass(frozen=True)
class Body:
    """One request's body, split as the SDK's `create` takes it.

    `arguments` are keyword arguments the SDK checks, beside the model and an
    empty `messages`; `raw` (its `extra_body`) holds the history and the
    tools, already in OpenAI's shape, and the options the SDK does not take. The SDK's
    transform checks each message against every TypedDict of its unions:
    about 0.25 ms a message with the GIL held, 100 ms for 400 (twice a turn),
    and 1 ms for a dozen tools' schemas. Each keeps its place in the body (an
    empty value is given in `arguments`, which `raw` replaces), so the bytes
    sent are the same as through the transform.
    """

    arguments: dict[str, Any]
    raw: dict[str, Any]


def request_body(
    request: ChatRequest,
    limits: ServerLimits,
    *,
    stream: bool,
    token_limit: str,
    known: Known,
    forced: dict[str, Any] | None = None,
) -> Body:
    """The body of one request: `forced` is a tool_choice naming one tool, asked again."""
    arguments = limits.arguments(
        optional_arguments(request, stream=stream, token_limit=token_limit, known=known)
    )
    if forced is not None:
        arguments["tool_choice"] = forced
    raw: dict[str, Any] = {"messages": messages_taken(request.messages, limits)}
    for name in _NOT_THE_SDKS.intersection(arguments):
        raw[name] = arguments.pop(name)
    if "tools" in arguments:
        raw["tools"] = arguments["tools"]
        arguments["tools"] = []
    return Body(arguments=arguments, raw=raw)


def messages_taken(messages: list[dict[str, Any]], limits: ServerLimits) -> list[dict[str, Any]]:
    """The history as this server takes it.

    Some refuse an assistant's null content; a model that refuses images is
    told of earlier ones in words.
    """
    if not limits.images:
        messages = images_left_out(messages)
    if not limits.content_text:
        return messages
    return [
        {**m, "content": ""} if m.get("role") == "assistant" and m.get("content") is None else m
        for m in messages
    ]


def optional_arguments(
    request: ChatRequest, *, stream: bool, token_limit: str, known: Known = Known()
) -> dict[str, Any]:
    """The request's optional fields, each sent only when set (tool_choice only with tools)."""
    arguments: dict[str, Any] = {}
    if stream and known.stream_usage:
        arguments["stream_options"] = {"include_usage": True}
    for name, value in request.options.items():
        # OpenAI refuses `parallel_tool_calls` without tools (a compose call has none).
        if name != "parallel_tool_calls" or request.tools:
            arguments[name] = value
    if request.tools:
        arguments["tools"] = tools_for_model(request.tools)
        if request.tool_choice:
            arguments["tool_choice"] = request.tool_choice
        if known.parallel_tool_calls is not None:
            # The provider's configuration knows its server: it wins over a client's wish.
            arguments["parallel_tool_calls"] = known.parallel_tool_calls
    if request.response_format:
        arguments["response_format"] = request.response_format
    if request.max_tokens or known.max_tokens:
        arguments[token_limit] = request.max_tokens or known.max_tokens
    if request.temperature is not None:
        arguments["temperature"] = request.temperature
    return arguments


def requests_sent(request_headers: Mapping[str, str]) -> int:
    """How many requests one SDK call sent: the SDK numbers its retries in a request header."""
    try:
        return int(request_headers.get("x-stainless-retry-count", "0")) + 1
    except ValueError:
        return 1
