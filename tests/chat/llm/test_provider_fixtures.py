"""Real providers' recorded responses, replayed byte for byte to the openai SDK.

The files in tests/fixtures/providers/ (SOURCES.md says where each came
from) are served by the scripted server as they were recorded; each test
asserts what a user would see: the text, the tool calls, the usage or its
absence, the reasoning kept aside, or the provider's own error.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from chat.llm.base import ChatRequest, Done, ProviderError, StreamRestart, TextDelta
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


def calls_of(completion) -> list[tuple[str, str, object]]:
    return [(c.id, c.name, json.loads(c.arguments)) for c in completion.tool_calls]


@pytest.mark.parametrize(
    ("name", "text", "usage"),
    [
        ("heroku_claude-3-7-sonnet_text.json", "The capital of France is Paris.", (14, 51)),
        ("huggingface_llama-3.1-8b_text.sse", "Paris", (40, 2)),
        ("crusoe_llama-3.3-70b_text.sse", "1, 2, 3, 4, 5", (46, 14)),
        # OpenAI's moderation chunk comes after the usage chunk and carries no usage.
        ("openai_gpt-5_moderation_after_usage.sse", "Paris.", (13, 11)),
        # OpenRouter's web search citations stream as `annotations` without an `index`.
        (
            "openrouter_deepseek-chat_web_search_annotations.sse",
            "The URL for Pydantic AI's GitHub repository is:",
            (2317, 53),
        ),
    ],
)
def test_a_plain_answer_keeps_its_text_and_usage(server, provider, name, text, usage):
    events, completion = replayed(server, provider, name)
    assert completion.content
    assert completion.content.startswith(text)
    assert text_of(events) == completion.content
    assert not any(isinstance(event, StreamRestart) for event in events)
    assert (completion.prompt_tokens, completion.completion_tokens) == usage
    assert completion.finish_reason == "stop"
    assert completion.attempts == 1
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("name", "text", "reasoning", "usage"),
    [
        (
            "zai_glm-4.7_reasoning_content.sse",
            "4",
            "\n1.  **Analyze the User's Request:**",
            (13, 564),
        ),
        (
            "cerebras_gpt-oss-120b_reasoning.json",
            "4.",
            'User asks simple: "What is 2 + 2?',
            (79, 37),
        ),
        (
            "bedrock_gpt-oss-safeguard-20b_reasoning.json",
            "SAFE",
            'The user says: "Reply with exactly SAFE."',
            (72, 56),
        ),
        # Groq reports a stream's usage only in `x_groq.usage` on the finishing chunk.
        (
            "groq_compound_x_groq_usage.sse",
            "The weather in San Francisco today is partly cloudy",
            "<think>\nTo find the current weather",
            (5003, 359),
        ),
    ],
)
def test_reasoning_is_kept_aside_and_usage_read(server, provider, name, text, reasoning, usage):
    events, completion = replayed(server, provider, name)
    assert completion.content
    assert completion.content.startswith(text)
    assert text_of(events) == completion.content
    assert completion.reasoning
    assert completion.reasoning.startswith(reasoning)
    assert completion.reasoning not in completion.content
    assert (completion.prompt_tokens, completion.completion_tokens) == usage
    assert completion.finish_reason == "stop"


def test_snowflake_stream_without_finish_reason_keeps_its_text(server, provider):
    events, completion = replayed(
        server, provider, "snowflake_claude-sonnet-4-6_no_finish_reason.sse"
    )
    assert text_of(events) == completion.content == "4"
    assert (completion.prompt_tokens, completion.completion_tokens) == (22, 5)
    assert completion.attempts == 1
    assert len(server.requests) == 1


def test_snowflake_json_tool_call_with_an_empty_finish_reason(server, provider):
    events, completion = replayed(
        server, provider, "snowflake_claude-sonnet-4-6_tool_call.json", tools=TOOLS
    )
    assert text_of(events) == ""
    assert completion.content is None
    assert calls_of(completion) == [
        ("toolu_bdrk_015BgHUFs4HS1TVWWwNRNxip", "get_weather", {"city": "Mexico City"})
    ]
    assert completion.finish_reason == ""
    assert (completion.prompt_tokens, completion.completion_tokens) == (568, 55)


def test_crusoe_json_tool_call_with_reasoning(server, provider):
    events, completion = replayed(
        server, provider, "crusoe_glm-5.2_tool_call_reasoning.json", tools=TOOLS
    )
    assert text_of(events) == ""
    assert completion.content is None
    assert calls_of(completion) == [
        ("chatcmpl-tool-bbb91941bf76335c", "get_weather", {"city": "Paris"})
    ]
    assert completion.reasoning
    assert completion.reasoning.startswith("The user wants to know the weather in Paris.")
    assert (completion.prompt_tokens, completion.completion_tokens) == (167, 37)


def test_gemini_tool_call_without_an_id_gets_a_stable_one(server, provider):
    _, first = replayed(server, provider, "gemini-2.5-pro_tool_call_without_id.json", tools=TOOLS)
    _, again = replayed(server, provider, "gemini-2.5-pro_tool_call_without_id.json", tools=TOOLS)
    [(call_id, name, arguments)] = calls_of(first)
    assert re.fullmatch(r"call_[0-9a-f]{24}", call_id)
    assert (name, arguments) == ("get_current_time", {})
    assert calls_of(again) == calls_of(first)
    assert first.finish_reason == "tool_calls"
    assert (first.prompt_tokens, first.completion_tokens) == (35, 12)


def test_anthropic_streamed_tool_call_whose_index_starts_at_one(server, provider):
    events, completion = replayed(
        server, provider, "anthropic_claude-haiku-4-5_tool_call_index_one.sse", tools=TOOLS
    )
    assert not any(isinstance(event, StreamRestart) for event in events)
    assert text_of(events) == completion.content == "Reading it."
    assert calls_of(completion) == [("toolu_sanitized", "read_file", {"path": "a.txt"})]
    assert completion.finish_reason == "tool_calls"
    assert (completion.prompt_tokens, completion.completion_tokens) == (None, None)
    assert completion.attempts == 1
    assert len(server.requests) == 1


def test_snowflake_reasoning_details_are_kept_as_the_reasoning(server, provider):
    events, completion = replayed(
        server, provider, "snowflake_claude-sonnet-4-6_reasoning_details.sse"
    )
    assert completion.content
    assert completion.content.startswith("15 \u00d7 27 = **405**")
    assert text_of(events) == completion.content
    assert completion.reasoning == "15 * 27 = 405"
    assert (completion.prompt_tokens, completion.completion_tokens) == (45, 73)


def test_snowflake_json_reasoning_details_are_kept_beside_the_text_and_call(server, provider):
    events, completion = replayed(
        server,
        provider,
        "snowflake_claude-sonnet-4-6_tool_call_reasoning_details.json",
        tools=TOOLS,
    )
    assert text_of(events) == completion.content == "Sure! Let me check that for you!"
    assert calls_of(completion) == [
        ("toolu_bdrk_01VmA9jmWpws4HgPqjhtGo6i", "get_weather", {"city": "Mexico City"})
    ]
    assert completion.reasoning == "Let me get the weather for Mexico City."
    assert (completion.prompt_tokens, completion.completion_tokens) == (597, 81)


def test_openrouter_tool_call_without_arguments_is_a_call_without_arguments(server, provider):
    events, completion = replayed(
        server,
        provider,
        "openrouter_claude-sonnet-4.5_tool_call_without_arguments.json",
        tools=TOOLS,
    )
    assert text_of(events) == completion.content == "I'll search for education content for you."
    # Sent back to a server in the history, "{}" is JSON every server parses; "" is not.
    assert [(c.id, c.name, c.arguments) for c in completion.tool_calls] == [
        ("toolu_vrtx_015QAXScZzRDPttiPoc34AdD", "find_education_content", "{}")
    ]
    assert (completion.prompt_tokens, completion.completion_tokens) == (568, 48)
