"""The OpenAI provider against the scripted server, through the real openai SDK."""

from __future__ import annotations

import json

import pytest

from chat.llm.base import ChatRequest, Done, ProviderError, StreamRestart, TextDelta, complete
from chat.llm.openai_provider import OpenAIProvider
from tests.llm_server import ScriptedLLMServer, error_reply, text_reply, tool_calls_reply

USER = [{"role": "user", "content": "hello"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Arithmetic",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]


@pytest.fixture
def server():
    server = ScriptedLLMServer().start()
    yield server
    server.stop()


@pytest.fixture
def sleeps():
    return []


@pytest.fixture
def provider(server, sleeps):
    return OpenAIProvider(
        api_key="test", base_url=server.base_url, timeout_s=2, max_retries=3, sleep=sleeps.append
    )


def test_streams_text_word_by_word_with_usage(server, provider):
    server.push(text_reply("The answer is 4."))
    events = list(provider.stream(ChatRequest(model="m", messages=USER)))
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert deltas == ["The ", "answer ", "is ", "4."]
    done = events[-1]
    assert isinstance(done, Done)
    assert done.completion.content == "The answer is 4."
    assert done.completion.finish_reason == "stop"
    assert (done.completion.prompt_tokens, done.completion.completion_tokens) == (11, 7)
    assert done.completion.first_token_ms is not None
    assert done.completion.attempts == 1
    request = server.requests[0]
    assert request["stream"] is True
    assert request["stream_options"] == {"include_usage": True}
    assert "tools" not in request
    assert "tool_choice" not in request


def test_assembles_parallel_tool_calls_from_deltas(server, provider):
    server.push(
        tool_calls_reply(
            [
                ("calculator", '{"expression": "12*7"}', "call_a"),
                ("calculator", '{"expression": "1+1"}', "call_b"),
            ]
        )
    )
    completion = complete(
        provider, ChatRequest(model="m", messages=USER, tools=TOOLS, tool_choice="auto")
    )
    assert completion.content is None
    assert completion.finish_reason == "tool_calls"
    assert [(c.id, c.name, json.loads(c.arguments)) for c in completion.tool_calls] == [
        ("call_a", "calculator", {"expression": "12*7"}),
        ("call_b", "calculator", {"expression": "1+1"}),
    ]
    assert server.requests[0]["tools"] == TOOLS
    assert server.requests[0]["tool_choice"] == "auto"


def test_429_is_retried_after_the_servers_retry_after(server, provider, sleeps):
    server.push(error_reply(429, "slow down", headers={"Retry-After": "1.5"}), text_reply("ok"))
    completion = complete(provider, ChatRequest(model="m", messages=USER))
    assert completion.content == "ok"
    assert completion.attempts == 2
    assert sleeps == [1.5]


def test_500_twice_then_success(server, provider, sleeps):
    server.push(error_reply(500), error_reply(503), text_reply("fine"))
    completion = complete(provider, ChatRequest(model="m", messages=USER))
    assert completion.content == "fine"
    assert completion.attempts == 3
    assert len(sleeps) == 2
    assert len(server.requests) == 3


def test_attempts_are_capped(server, sleeps):
    provider = OpenAIProvider(
        api_key="t", base_url=server.base_url, max_retries=2, sleep=sleeps.append
    )
    server.push(*[error_reply(500, "boom") for _ in range(5)])
    with pytest.raises(ProviderError) as caught:
        complete(provider, ChatRequest(model="m", messages=USER))
    assert caught.value.attempts == 3
    assert caught.value.status == 500
    assert "after 3 attempts" in str(caught.value)
    assert "boom" in str(caught.value)
    assert len(server.requests) == 3


def test_client_errors_are_not_retried(server, provider, sleeps):
    server.push(error_reply(401, "bad key"))
    with pytest.raises(ProviderError) as caught:
        complete(provider, ChatRequest(model="m", messages=USER))
    assert caught.value.status == 401
    assert "bad key" in str(caught.value)
    assert sleeps == []
    assert len(server.requests) == 1


def test_invalid_history_is_refused_like_the_real_api(server, provider):
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "x", "arguments": "{}"}}
            ],
        },
        {"role": "user", "content": "again"},
    ]
    with pytest.raises(ProviderError) as caught:
        complete(provider, ChatRequest(model="m", messages=messages))
    assert caught.value.status == 400
    assert "c1" in str(caught.value)


def test_timeout_is_retried_then_reported(server, sleeps):
    provider = OpenAIProvider(
        api_key="t", base_url=server.base_url, timeout_s=0.3, max_retries=1, sleep=sleeps.append
    )
    server.push(text_reply("late", delay_s=1.0), text_reply("late", delay_s=1.0))
    with pytest.raises(ProviderError) as caught:
        complete(provider, ChatRequest(model="m", messages=USER))
    assert "timed out" in str(caught.value)
    assert caught.value.attempts == 2


def test_stream_cut_mid_answer_is_retried_with_a_restart(server, provider):
    server.push(
        text_reply("one two three four five", cut_after_chunks=3), text_reply("whole answer")
    )
    events = list(provider.stream(ChatRequest(model="m", messages=USER)))
    restarts = [e for e in events if isinstance(e, StreamRestart)]
    assert len(restarts) == 1
    assert restarts[0].attempt == 2
    after_restart = events[events.index(restarts[0]) + 1 :]
    assert "".join(e.text for e in after_restart if isinstance(e, TextDelta)) == "whole answer"
    done = events[-1]
    assert isinstance(done, Done)
    assert done.completion.content == "whole answer"
    assert done.completion.attempts == 2


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "2"}, 2.0),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"Retry-After": "-5"}, 0.0),
        ({"Retry-After": "nan"}, None),
        ({"Retry-After": "not a date"}, None),
        ({"Retry-After": "100000"}, 60.0),
        ({}, None),
    ],
)
def test_retry_after_is_read_defensively(headers, expected):
    from chat.llm.openai_provider import retry_after_seconds

    assert retry_after_seconds({k.lower(): v for k, v in headers.items()}) == expected


def test_an_unreadable_retry_after_falls_back_to_backoff(server, provider, sleeps):
    server.push(error_reply(503, headers={"Retry-After": "garbage"}), text_reply("ok"))
    assert complete(provider, ChatRequest(model="m", messages=USER)).content == "ok"
    assert len(sleeps) == 1
    assert 0 < sleeps[0] <= 0.5
