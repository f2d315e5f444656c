"""Reading a streamed answer chunk by chunk, as the SDK's accumulator can take it.

The openai SDK assembles a stream's text and tool-call deltas
(`ChatCompletionStreamState`), but servers send what it does not expect or
keep: reasoning beside the text, `reasoning_details` with string indexes,
`annotations` without an index, a call's index that is not its place in the
list (Anthropic's first call is 1 after text), arguments as a JSON object, a
call's id and name repeated in every chunk (llama-cpp-python), usage under
`x_groq`. `chunk_tidy` takes those out of a chunk, or puts them in the shape
the SDK takes, and keeps what toolchat uses in a `StreamRead`. The provider
that sends the requests is chat/llm/openai_provider.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from chat.llm.lenient import REASONING_FIELDS, arguments_text, reasoning_details_text, usage_read


@dataclasses.dataclass
class StreamRead:
    """What a stream gave so far: the SDK's accumulated state, and what it does not keep."""

    state: ChatCompletionStreamState[object] = dataclasses.field(
        default_factory=ChatCompletionStreamState
    )
    first_token_ms: int | None = None
    finish_reason: str = ""
    usage: tuple[int | None, int | None] = (None, None)
    reasoning: list[str] = dataclasses.field(default_factory=list)
    spoke: bool = False  # a chunk said who speaks (`role`): a model's answer began
    # Each call's (index) id and name as first sent: a server that repeats them in every
    # chunk (llama-cpp-python) must not have them joined into one long name.
    calls: dict[int, tuple[str | None, str | None]] = dataclasses.field(default_factory=dict)
    # The server's index of each call -> its place in the list, in the order calls came.
    places: dict[int, int] = dataclasses.field(default_factory=dict)


def chunk_tidy(chunk: ChatCompletionChunk, read: StreamRead) -> None:
    """Take out of a chunk what the SDK's accumulator must not see, keeping the reasoning.

    The reasoning (`reasoning_content`, `reasoning`, else the readable text of
    `reasoning_details`) is gathered here, and `reasoning_details` dropped (its
    entries' `index` may be a string, which the accumulator refuses); message
    `annotations` are dropped (some servers stream them without the `index` the
    accumulator needs, and toolchat does not use them); a tool call delta
    without an `index` gets its place in the list, an `index` that is not the
    next place (Anthropic's first call is 1 when text came before it) is
    mapped to its place in the order the calls came, arguments sent as a JSON
    object are encoded as the string the API sends, and a call's id and name
    sent again in a later chunk (llama-cpp-python) are not sent on, since the
    accumulator would join them.
    """
    for choice in chunk.choices:
        delta = choice.delta
        extra = delta.model_extra
        if extra:
            said = [extra.pop(name, None) for name in REASONING_FIELDS]
            said = [value for value in said if isinstance(value, str) and value]
            details = reasoning_details_text(extra.pop("reasoning_details", None))
            read.reasoning.extend(said or [details])
            extra.pop("annotations", None)
        for position, call in enumerate(delta.tool_calls or []):
            if getattr(call, "index", None) is None:
                call.index = position
            # The accumulator takes an index as a place in the list: a gap would crash it.
            call.index = read.places.setdefault(call.index, len(read.places))
            _call_delta_tidy(call, read.calls)


def _call_delta_tidy(call: Any, seen: dict[int, tuple[str | None, str | None]]) -> None:
    """One tool call delta, as the accumulator can take it (see `chunk_tidy`)."""
    first_id, first_name = seen.get(call.index, (None, None))
    if first_id is not None and call.id == first_id:
        call.id = None
    if call.function is None:
        seen[call.index] = (first_id or call.id, first_name)
        return
    if first_name is not None and call.function.name == first_name:
        call.function.name = None
    # Typed as a string, but not validated: a server may send an object.
    arguments: object = call.function.arguments
    if not isinstance(arguments, str | None):
        call.function.arguments = arguments_text(arguments)
    seen[call.index] = (first_id or call.id, first_name or call.function.name)


def chunk_usage(chunk: ChatCompletionChunk) -> tuple[int | None, int | None]:
    """The usage a chunk reports (Groq's in `x_groq.usage`), or (None, None)."""
    if chunk.usage is not None:
        return chunk.usage.prompt_tokens, chunk.usage.completion_tokens
    extra = chunk.model_extra
    if extra and "x_groq" in extra:
        return usage_read(extra)
    return None, None


def stream_finish_reason(state: ChatCompletionStreamState[object]) -> str:
    """The finish reason the stream has given so far ("" until its finishing chunk)."""
    choices = state.current_completion_snapshot.choices
    # Typed as always set, but it is None in the snapshot until the finishing chunk.
    reason: str | None = choices[0].finish_reason if choices else None
    return reason or ""
