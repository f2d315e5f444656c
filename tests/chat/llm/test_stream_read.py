"""A stream's assembly joins its chunks as the openai SDK's accumulator does, in one pass.

Its chunks are the JSON objects a server sent; the SDK's accumulator is given
the same chunks as its models.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState, ContentDeltaEvent
from openai.types.chat import ChatCompletionChunk

from chat.llm.lenient import usage_read
from chat.llm.stream_read import Assembly, StreamRead, chunk_tidy, stream_finish_reason


def chunk(*, delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any):
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m-1",
        "choices": choices,
        **extra,
    }


def assembled(pieces: list[dict[str, Any]]) -> tuple[Assembly, list[str], StreamRead]:
    """The pieces read as a stream reads them: each tidied, then added."""
    read = StreamRead()
    texts: list[str] = []
    for piece in copy.deepcopy(pieces):
        chunk_tidy(piece, read)
        texts += read.state.add(piece)
    return read.state, texts, read


def call(index: int, **fields: Any) -> dict[str, Any]:
    return {"index": index, **fields}


STREAMS = {
    "text": [
        chunk(delta={"role": "assistant", "content": ""}),
        chunk(delta={"content": "Twelve times "}),
        chunk(delta={"content": "seven is 84."}),
        chunk(delta={}, finish="stop"),
        chunk(usage={"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}),
    ],
    "two calls in pieces": [
        chunk(delta={"role": "assistant", "content": None}),
        chunk(
            delta={
                "tool_calls": [
                    call(
                        0, id="call_a", type="function", function={"name": "calc", "arguments": ""}
                    )
                ]
            }
        ),
        chunk(delta={"tool_calls": [call(0, function={"arguments": '{"expr'})]}),
        chunk(delta={"tool_calls": [call(0, function={"arguments": 'ession": "1+1"}'})]}),
        chunk(
            delta={
                "tool_calls": [
                    call(
                        1, id="call_b", type="function", function={"name": "now", "arguments": "{}"}
                    )
                ]
            }
        ),
        chunk(delta={}, finish="tool_calls"),
    ],
    "text, then a call": [
        chunk(delta={"role": "assistant", "content": "Let me "}),
        chunk(delta={"content": "check."}),
        chunk(delta={"tool_calls": [call(0, id="c1", type="function", function={"name": "f"})]}),
        chunk(delta={"tool_calls": [call(0, function={"arguments": "{}"})]}, finish="tool_calls"),
    ],
    "a first chunk without choices": [
        chunk(),
        chunk(delta={"role": "assistant", "content": "Hi"}),
        chunk(delta={}, finish="stop"),
    ],
}


@pytest.mark.parametrize("name", list(STREAMS))
def test_the_assembly_is_what_the_sdks_accumulator_makes(name):
    sdk = ChatCompletionStreamState[object]()
    sdk_texts = []
    for piece in STREAMS[name]:
        typed = ChatCompletionChunk.model_validate(piece)
        sdk_texts += [e.delta for e in sdk.handle_chunk(typed) if isinstance(e, ContentDeltaEvent)]
    ours, our_texts, _ = assembled(STREAMS[name])
    snapshot = sdk.current_completion_snapshot
    message = snapshot.choices[0].message
    answer = ours.answer
    assert answer is not None
    assert (ours.id, ours.model) == (snapshot.id, snapshot.model)
    assert answer.text == message.content
    assert our_texts == [text for text in sdk_texts if text]
    assert stream_finish_reason(ours) == (snapshot.choices[0].finish_reason or "")
    assert [(c.id, c.name, c.arguments) for c in answer.calls] == [
        (c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []
    ]


def test_an_assembly_with_no_chunk_has_no_answer():
    assert Assembly().started is False
    assert Assembly().answer is None
    assert stream_finish_reason(Assembly()) == ""


def test_a_long_answer_costs_time_in_proportion_to_its_length():
    # The SDK's accumulator rebuilt the whole message at every chunk (quadratic).
    def assemble(words: int) -> float:
        pieces = [chunk(delta={"content": f"word{i} "}) for i in range(words)]
        # This thread's CPU time: what other processes and threads of a busy machine
        # take while it runs does not count (wall time did, and failed under load).
        started = time.thread_time()
        read = StreamRead()
        for piece in pieces:
            chunk_tidy(piece, read)
            read.state.add(piece)
        return time.thread_time() - started

    assemble(200)  # warm-up
    short, long = min(assemble(500) for _ in range(5)), min(assemble(4000) for _ in range(5))
    assert long < short * 8 * 3, (short, long)  # 8 times the words: linear, with slack


def test_what_a_server_sends_in_odd_shapes_is_read_around_not_raised():
    answer_text = [
        chunk(delta={"role": "assistant", "content": "Half "}),
        {"object": "chat.completion.chunk", "choices": None},  # no list
        {"choices": ["not an object", {"delta": "not an object"}]},
        {"choices": [{"delta": {"content": "and half."}}]},  # no index: the first choice
        {"choices": [{"index": 0, "delta": {"tool_calls": {"not": "a list"}}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": 7}]},  # not a reason
        chunk(delta={}, finish="stop"),
        {"choices": [], "usage": {"prompt_tokens": "5", "completion_tokens": 6}},
    ]
    ours, texts, _ = assembled(answer_text)

    assert texts == ["Half ", "and half."]
    assert ours.answer is not None
    assert ours.answer.text == "Half and half."
    assert ours.answer.calls == []
    assert stream_finish_reason(ours) == "stop"
    assert usage_read(answer_text[-1]) == (None, 6, None)  # a count that is not a number is not one


def test_a_call_without_an_index_or_a_function_takes_its_place_and_arguments_come_as_text():
    calls = [
        chunk(delta={"tool_calls": [{"id": "c1", "function": {"name": "calc"}}, "junk"]}),
        chunk(delta={"tool_calls": [{"index": 0, "function": {"arguments": {"x": 1}}}]}),
        chunk(delta={"tool_calls": [{"index": 1, "id": "c2", "function": None}]}),
        chunk(delta={"tool_calls": [{"index": 1, "function": {"name": "now", "arguments": ""}}]}),
        chunk(delta={}, finish="tool_calls"),
    ]
    ours, _, _ = assembled(calls)

    assert ours.answer is not None
    assert [(c.id, c.name, c.arguments) for c in ours.answer.calls] == [
        ("c1", "calc", '{"x": 1}'),
        ("c2", "now", ""),
    ]


def test_the_reasoning_is_kept_apart_from_the_answer():
    _, texts, read = assembled(
        [
            chunk(delta={"role": "assistant", "reasoning_content": "Think. "}),
            chunk(delta={"reasoning": "More. ", "content": "Done."}),
            chunk(delta={}, finish="stop"),
        ]
    )

    assert texts == ["Done."]
    assert read.reasoning == ["Think. ", "More. "]
