"""Reading a streamed answer chunk by chunk: its text, its tool calls, what servers add.

A stream's text and tool-call deltas are joined by `Assembly`, the way the
openai SDK's `ChatCompletionStreamState` joins them (the first chunk's id and
model; each field of a message and of a call joined from its pieces, a call
by its index; the first choice is the answer), but in one pass: the SDK's
accumulator dumps and rebuilds the whole message at every chunk, so its cost
grows with the square of the answer's length (it was an eighth of a two-pass
turn's CPU in the embedded default, with a 20-word answer).

Servers send what neither expects: reasoning beside the text,
`reasoning_details` with string indexes, `annotations` without an index, a
call's index that is not its place in the list (Anthropic's first call is 1
after text), arguments as a JSON object, a call's id and name repeated in
every chunk (llama-cpp-python), usage under `x_groq`. `chunk_tidy` takes
those out of a chunk, or puts them in the shape the assembly takes, and keeps
what toolchat uses in a `StreamRead`. The provider that sends the requests is
chat/llm/openai_call.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from openai.types.chat import ChatCompletionChunk

from chat.llm.lenient import REASONING_FIELDS, arguments_text, reasoning_details_text, usage_read


def _joined(so_far: Any, piece: Any) -> Any:
    """A field after one more piece of it: text is joined, a first value taken, None skipped."""
    if so_far is None:
        return piece
    if isinstance(so_far, str) and isinstance(piece, str):
        return so_far + piece
    return so_far


@dataclasses.dataclass
class CallParts:
    """One tool call as its deltas built it."""

    id: str | None = None
    name: str | None = None
    arguments: Any = None  # text (chunk_tidy encodes an object), or None if none came


@dataclasses.dataclass
class ChoiceParts:
    """One choice of a stream as its deltas built it."""

    content: list[str] | None = None  # the pieces of text; None if no delta carried any
    calls: list[CallParts] = dataclasses.field(default_factory=list)
    finish_reason: str | None = None

    @property
    def text(self) -> str | None:
        return None if self.content is None else "".join(self.content)


@dataclasses.dataclass
class Assembly:
    """A stream's answer so far: the first chunk's id and model, and each choice's parts."""

    started: bool = False  # a chunk came
    id: str = ""
    model: str = ""
    choices: dict[int, ChoiceParts] = dataclasses.field(default_factory=dict)

    def add(self, chunk: ChatCompletionChunk) -> list[str]:
        """Take one (tidied) chunk in; the text it adds, piece by piece."""
        if not self.started:
            self.started = True
            self.id, self.model = chunk.id or "", chunk.model or ""
        texts = []
        for choice in chunk.choices:
            parts = self.choices.setdefault(choice.index, ChoiceParts())
            delta = choice.delta
            if isinstance(delta.content, str):
                if parts.content is None:
                    parts.content = []
                parts.content.append(delta.content)
                if delta.content:
                    texts.append(delta.content)
            for call in delta.tool_calls or []:
                while len(parts.calls) <= call.index:
                    parts.calls.append(CallParts())
                built = parts.calls[call.index]
                built.id = _joined(built.id, call.id)
                if call.function is not None:
                    built.name = _joined(built.name, call.function.name)
                    built.arguments = _joined(built.arguments, call.function.arguments)
            if choice.finish_reason:
                parts.finish_reason = choice.finish_reason
        return texts

    @property
    def answer(self) -> ChoiceParts | None:
        """The first choice: the answer (None until a chunk carried a choice)."""
        return self.choices[min(self.choices)] if self.choices else None


@dataclasses.dataclass
class StreamRead:
    """What a stream gave so far: its assembled answer, and what the assembly does not keep."""

    state: Assembly = dataclasses.field(default_factory=Assembly)
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
    """Take out of a chunk what the assembly must not see, keeping the reasoning.

    The reasoning (`reasoning_content`, `reasoning`, else the readable text of
    `reasoning_details`) is gathered here, and `reasoning_details` dropped (its
    entries' `index` may be a string); message `annotations` are dropped (some
    servers stream them without an `index`, and toolchat does not use them); a
    tool call delta
    without an `index` gets its place in the list, an `index` that is not the
    next place (Anthropic's first call is 1 when text came before it) is
    mapped to its place in the order the calls came, arguments sent as a JSON
    object are encoded as the string the API sends, and a call's id and name
    sent again in a later chunk (llama-cpp-python) are not sent on, since the
    assembly would join them.
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
            # The assembly takes an index as a place in the list, with no gaps.
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


def stream_finish_reason(state: Assembly) -> str:
    """The finish reason the stream has given so far ("" until its finishing chunk)."""
    answer = state.answer
    return (answer.finish_reason if answer is not None else None) or ""
