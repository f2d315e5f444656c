"""A stream's assembly joins its chunks as the openai SDK's accumulator does, in one pass."""

from __future__ import annotations

import time
from typing import Any

import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState, ContentDeltaEvent
from openai.types.chat import ChatCompletionChunk

from chat.llm.stream_read import Assembly, stream_finish_reason


def chunk(*, delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any):
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return ChatCompletionChunk.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m-1",
            "choices": choices,
            **extra,
        }
    )


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
    ours = Assembly()
    sdk_texts, our_texts = [], []
    for piece in STREAMS[name]:
        sdk_texts += [e.delta for e in sdk.handle_chunk(piece) if isinstance(e, ContentDeltaEvent)]
        our_texts += ours.add(piece)
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
        started = time.perf_counter()
        assembly = Assembly()
        for piece in pieces:
            assembly.add(piece)
        return time.perf_counter() - started

    assemble(200)  # warm-up
    short, long = min(assemble(500) for _ in range(3)), min(assemble(4000) for _ in range(3))
    assert long < short * 8 * 3, (short, long)  # 8 times the words: linear, with slack
