"""Real providers' recorded responses, replayed byte for byte to the openai SDK.

The files in tests/fixtures/providers/ (SOURCES.md says where each came
from) are served by the scripted server as they were recorded; each test
asserts what a user would see: the text, the tool calls, the usage or its
absence, the reasoning kept aside, or the provider's own error.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chat.llm.base import ChatRequest, Done, ProviderError, TextDelta
from chat.llm.openai_provider import OpenAIProvider
from tests.llm_server import ScriptedLLMServer, raw_reply

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "providers"
USER = [{"role": "user", "content": "hello"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_capital",
            "description": "The capital of a country",
            "parameters": {"type": "object", "properties": {"country": {"type": "string"}}},
        },
    }
]


@pytest.fixture
def server():
    server = ScriptedLLMServer().start()
    yield server
    server.stop()


@pytest.fixture
def provider(server):
    return OpenAIProvider(api_key="test", base_url=server.base_url, timeout_s=5, max_retries=2)


def replayed(server, provider, name: str, *, tools=None):
    """The events of one call answered with the fixture `name`, and the completion."""
    kind = "application/json" if name.endswith(".json") else "text/event-stream"
    server.push(raw_reply((FIXTURES / name).read_bytes(), content_type=kind))
    events = list(provider.stream(ChatRequest(model="m", messages=USER, tools=tools)))
    assert isinstance(events[-1], Done)
    return events, events[-1].completion


def text_of(events) -> str:
    return "".join(event.text for event in events if isinstance(event, TextDelta))


def test_every_fixture_is_named_in_sources():
    sources = (FIXTURES / "SOURCES.md").read_text()
    for path in FIXTURES.iterdir():
        if path.name != "SOURCES.md":
            assert f"| {path.name} |" in sources, path.name


def test_openai_streamed_tool_call_then_answer(server, provider):
    events, completion = replayed(server, provider, "openai_gpt-4o-mini_tool_call.sse", tools=TOOLS)
    assert text_of(events) == ""
    assert [(c.id, c.name, json.loads(c.arguments)) for c in completion.tool_calls] == [
        ("call_ZR5UUuTt3pf61kjwAJIYdVMj", "get_capital", {"country": "UK"})
    ]
    assert completion.finish_reason == "tool_calls"
    assert (completion.prompt_tokens, completion.completion_tokens) == (53, 15)

    events, completion = replayed(server, provider, "openai_gpt-4o-mini_text.sse")
    assert text_of(events) == completion.content
    assert "London" in completion.content
    assert completion.prompt_tokens is not None


def test_deepseek_reasoning_is_kept_aside_from_the_text(server, provider):
    events, completion = replayed(server, provider, "deepseek-reasoner_reasoning_content.sse")
    assert completion.content == text_of(events)
    assert completion.content.endswith("today?")
    assert completion.reasoning
    assert completion.reasoning.startswith("Hmm,")
    assert completion.reasoning not in completion.content
    assert (completion.prompt_tokens, completion.completion_tokens) == (6, 212)
    assert completion.finish_reason == "stop"


def test_openrouter_encrypted_reasoning_and_the_usage_after_the_finish(server, provider):
    events, completion = replayed(server, provider, "openrouter_o3_reasoning.sse")
    assert completion.content
    assert completion.content == text_of(events)
    assert completion.reasoning is None  # o3's is only in encrypted `reasoning_details`
    assert completion.finish_reason == "stop"
    assert (completion.prompt_tokens, completion.completion_tokens) == (9, 104)


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("openrouter_minimax_error_chunk.sse", "Token limit reached"),
        ("groq_gpt-oss_error_event.sse", "Tool call validation failed"),
    ],
)
def test_a_providers_error_mid_stream_is_told_at_once_and_not_retried(server, provider, name, said):
    server.push(raw_reply((FIXTURES / name).read_bytes()))
    with pytest.raises(ProviderError) as caught:
        list(provider.stream(ChatRequest(model="m", messages=USER, tools=TOOLS)))
    assert said in str(caught.value)
    assert "connection error" not in str(caught.value)
    assert caught.value.status == 400
    assert caught.value.attempts == 1
    assert len(server.requests) == 1


def test_ollama_json_completion_with_reasoning_and_a_tool_call(server, provider):
    events, completion = replayed(
        server, provider, "ollama_gpt-oss_tool_call_reasoning.json", tools=TOOLS
    )
    assert text_of(events) == ""
    assert completion.content is None
    assert [(c.id, c.name, json.loads(c.arguments)) for c in completion.tool_calls] == [
        ("call_o2vnpxrw", "final_result", {"city": "Paris", "country": "France"})
    ]
    assert completion.reasoning
    assert "final_result" in completion.reasoning
    assert (completion.prompt_tokens, completion.completion_tokens) != (None, None)


def test_openrouter_json_completion_with_annotations(server, provider):
    events, completion = replayed(
        server, provider, "openrouter_gpt-5.1-codex-mini_annotations.json"
    )
    assert (
        text_of(events) == completion.content == "The PDF appears to be a dummy placeholder file."
    )
    assert completion.reasoning == "**Assessing dummy PDF file**"
    assert completion.finish_reason == "stop"
