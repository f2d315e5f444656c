"""The provider Protocol and the request/response types every provider shares.

A provider streams one chat completion. Text arrives as `TextDelta` events,
tool calls are assembled from their deltas by the provider and arrive whole in
the final `Completion`. When a provider retries after a stream was cut, it
sends `StreamRestart` first, so that whoever shows the text can drop what it
showed of the failed attempt.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

# The `json_schema` name of a request for follow-up suggestions (chat/engine/suggestions.py):
# the answer is {"suggestions": [...]}, two or three short prompts the user might send next.
SUGGESTIONS_FORMAT_NAME = "follow_up_suggestions"
# The `json_schema` name of the `llm` decider's request (chat/engine/continuation.py
# DECISION_FORMAT): the answer is {done, next_tool, arguments, final_output}.
DECISION_FORMAT_NAME = "continuation_decision"

# The options of a /v1 request passed to the model as the client gave them (checked in
# chat/openai_api/options.py), besides those a request's own fields carry (`temperature`,
# the token limit, `tool_choice`, `response_format`). OpenAI's, and the samplers of the
# open servers (vLLM, llama.cpp, Ollama's OpenAI API). A server that refuses one has it
# left out from then on (chat/llm/limits.py). The offline model honours `stop`.
FORWARDED = (
    "stop",
    "top_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "parallel_tool_calls",
    "reasoning_effort",
    "verbosity",
    "service_tier",
    "prediction",
    "prompt_cache_key",
    "safety_identifier",
    "user",
    "top_k",
    "min_p",
    "repetition_penalty",
)


def forwarded_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Of a run's client options, those sent to the model as they are."""
    return {name: options[name] for name in FORWARDED if options.get(name) is not None}


@dataclass(frozen=True)
class ToolCall:
    """One complete tool call as the model asked for it (arguments as the raw string)."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        """This call in the shape of an assistant message's `tool_calls` entry."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class ChatRequest:
    """What to send to the model. `tools=None` means no `tools` and no `tool_choice` at all."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    # A /v1 client's other options (`stop`, `top_p`, `seed`, ...: FORWARDED), sent as the
    # client gave them; `parallel_tool_calls` only with tools.
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Completion:
    """The whole answer of one model call."""

    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = ""
    model: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    # Of the prompt's tokens, those the server read from its cache (priced lower).
    cached_tokens: int | None = None
    first_token_ms: int | None = None
    latency_ms: int = 0
    attempts: int = 1
    # The model's reasoning (`reasoning_content`, `reasoning`): kept, never sent back to it.
    reasoning: str | None = None
    # How a server's limit changed this call ("asked again without streaming: ..."), if it did.
    note: str = ""
    # The server's id for the answer (`chatcmpl-...`), where it gave one: traces report it.
    response_id: str = ""
    # The answer's token log probabilities (`logprobs.content`), where the request asked for
    # them and the server gave them; None otherwise.
    logprobs: list[Any] | None = None


@dataclass(frozen=True)
class TextDelta:
    """A piece of the answer's text."""

    text: str


@dataclass(frozen=True)
class StreamRestart:
    """The previous attempt's stream broke; the text it sent is void."""

    attempt: int
    reason: str


@dataclass(frozen=True)
class Done:
    """The end of the stream, with the assembled completion."""

    completion: Completion


StreamEvent = TextDelta | StreamRestart | Done


class ProviderError(Exception):
    """A model call that failed for good (after the provider's own retries)."""

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 1) -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts


class ProviderStopped(Exception):
    """The call was given up because its `stop` event was set (the run no longer wants it)."""


@runtime_checkable
class ChatProvider(Protocol):
    """A streaming chat-completion backend (OpenAI-compatible HTTP, or the offline model)."""

    name: str

    def stream(
        self, request: ChatRequest, *, stop: threading.Event | None = None
    ) -> Iterator[StreamEvent]:
        """Yield text deltas (and restarts), then exactly one `Done`; raise ProviderError.

        When `stop` is set, the provider ends the call as soon as it can and
        raises ProviderStopped (a remote call within a read timeout at most).
        """
        ...
