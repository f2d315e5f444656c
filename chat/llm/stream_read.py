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
what toolchat uses in a `StreamRead`. The call that sends the requests is
chat/llm/openai_call.py's `Call`; chat/llm/streamed.py's `chunks_read` feeds
this module its chunks.

The chunks are the JSON objects the server sent, as dicts, not the SDK's
`ChatCompletionChunk` models: building one took about 65 microseconds with
the GIL held, most of a streamed answer's CPU (a 500-token answer read in 18
to 20 ms of CPU rather than 56 to 63; docs/performance.md, round ten). What a
server sends is read here field by field, whatever its shape: `chunk_tidy`
first makes every chunk's `choices` a list of objects, each with a `delta`
object, and its tool calls a list of objects.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from chat.llm.lenient import (
    REASONING_FIELDS,
    Usage,
    arguments_text,
    logprobs_read,
    reasoning_details_text,
)

Chunk = dict[str, Any]
"""One streamed chunk: the JSON object the server sent."""


def _items(value: Any) -> list[Any]:
    """A JSON array's items; nothing for anything else."""
    return value if isinstance(value, list) else []


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

    def add(self, chunk: Chunk) -> list[str]:
        """Take one chunk in (tidied by `chunk_tidy`); the text it adds, piece by piece."""
        if not self.started:
            self.started = True
            self.id, self.model = _text(chunk.get("id")), _text(chunk.get("model"))
        texts = []
        for choice in chunk["choices"]:
            index = choice.get("index")
            parts = self.choices.setdefault(index if isinstance(index, int) else 0, ChoiceParts())
            delta = choice["delta"]
            content = delta.get("content")
            if isinstance(content, str):
                if parts.content is None:
                    parts.content = []
                parts.content.append(content)
                if content:
                    texts.append(content)
            for call in delta.get("tool_calls") or ():
                while len(parts.calls) <= call["index"]:
                    parts.calls.append(CallParts())
                built = parts.calls[call["index"]]
                built.id = _joined(built.id, call.get("id"))
                function = call.get("function")
                if isinstance(function, dict):
                    built.name = _joined(built.name, function.get("name"))
                    built.arguments = _joined(built.arguments, function.get("arguments"))
            finish = choice.get("finish_reason")
            if finish and isinstance(finish, str):
                parts.finish_reason = finish
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
    usage: Usage = dataclasses.field(default_factory=Usage)
    reasoning: list[str] = dataclasses.field(default_factory=list)
    logprobs: list[Any] = dataclasses.field(default_factory=list)  # the answer's, chunk by chunk
    spoke: bool = False  # a chunk said who speaks (`role`): a model's answer began
    # Each call's (index) id and name as first sent: a server that repeats them in every
    # chunk (llama-cpp-python) must not have them joined into one long name.
    calls: dict[int, tuple[str | None, str | None]] = dataclasses.field(default_factory=dict)
    # The server's index of each call -> its place in the list, in the order calls came.
    places: dict[int | str, int] = dataclasses.field(default_factory=dict)


def chunk_tidy(chunk: Chunk, read: StreamRead) -> None:
    """Put a chunk in the shape the assembly reads, and take out what it must not see.

    Its `choices` become a list of objects, each with a `delta` object whose
    `tool_calls` (if any) are a list of objects: whatever else a server sent
    there is dropped. The reasoning (`reasoning_content`, `reasoning`, else the
    readable text of `reasoning_details`) is gathered here, and
    `reasoning_details` dropped (its entries' `index` may be a string); message
    `annotations` are dropped (some servers stream them without an `index`,
    and toolchat does not use them); a tool call delta without an `index`
    gets its place in the list, an `index` that is not the next place
    (Anthropic's first call is 1 when text came before it) is mapped to its
    place in the order the calls came, arguments sent as a JSON object are
    encoded as the string the API sends, and a call's id and name sent again
    in a later chunk (llama-cpp-python) are not sent on, since the assembly
    would join them.
    """
    choices = [choice for choice in _items(chunk.get("choices")) if isinstance(choice, dict)]
    chunk["choices"] = choices
    for choice in choices:
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            delta = choice["delta"] = {}
        if choice.get("logprobs") and choice.get("index", 0) in (0, None):
            read.logprobs.extend(logprobs_read(choice["logprobs"]))
        said = [delta.pop(name, None) for name in REASONING_FIELDS]
        said = [value for value in said if isinstance(value, str) and value]
        details = reasoning_details_text(delta.pop("reasoning_details", None))
        if said or details:
            read.reasoning.extend(said or [details])
        delta.pop("annotations", None)
        if "tool_calls" not in delta:
            continue
        calls = [call for call in _items(delta["tool_calls"]) if isinstance(call, dict)]
        delta["tool_calls"] = calls
        for position, call in enumerate(calls):
            index = call.get("index")
            if not isinstance(index, int | str):
                index = position
            # The assembly takes an index as a place in the list, with no gaps.
            call["index"] = read.places.setdefault(index, len(read.places))
            _call_delta_tidy(call, read.calls)


def _call_delta_tidy(call: dict[str, Any], seen: dict[int, tuple[str | None, str | None]]) -> None:
    """One tool call delta, as the accumulator can take it (see `chunk_tidy`)."""
    index = call["index"]
    first_id, first_name = seen.get(index, (None, None))
    if first_id is not None and call.get("id") == first_id:
        call["id"] = None
    function = call.get("function")
    if not isinstance(function, dict):
        call["function"] = None
        seen[index] = (first_id or call.get("id"), first_name)
        return
    if first_name is not None and function.get("name") == first_name:
        function["name"] = None
    # A server may send the arguments as an object.
    arguments = function.get("arguments")
    if not isinstance(arguments, str | None):
        function["arguments"] = arguments_text(arguments)
    seen[index] = (first_id or call.get("id"), first_name or function.get("name"))


def _text(value: Any) -> str:
    """A chunk's id or model as text ("" when it sent none)."""
    return value if isinstance(value, str) else ("" if value is None else str(value))


def stream_finish_reason(state: Assembly) -> str:
    """The finish reason the stream has given so far ("" until its finishing chunk)."""
    answer = state.answer
    return (answer.finish_reason if answer is not None else None) or ""
