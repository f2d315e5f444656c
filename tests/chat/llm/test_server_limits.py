"""The provider against servers that differ from the API they copy, through the real SDK.

Each scripted answer here is one a real server gives: a 400 for a parameter
it does not know, tool calls without ids or with arguments as an object, no
usage, a JSON completion to a stream request, a stream without
`finish_reason`, an error in the middle of a stream, reasoning beside the text.
"""

from __future__ import annotations

import json

import pytest

from chat.llm.base import ChatRequest, Done, ProviderError, TextDelta
from chat.llm.limits import image_input_refused, local_server, token_limit_name
from chat.llm.openai_provider import OpenAIProvider
from chat.llm.tool_bounds import tools_for_model
from tests.llm_server import (
    Reply,
    ScriptedLLMServer,
    error_reply,
    raw_reply,
    sse,
    text_reply,
)

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
def provider(server):
    return OpenAIProvider(api_key="test", base_url=server.base_url, timeout_s=2, max_retries=2)


@pytest.fixture
def openai_named(server):
    """A provider that sends the token limit as OpenAI's own API takes it."""
    return OpenAIProvider(
        api_key="test",
        base_url=server.base_url,
        timeout_s=2,
        max_retries=2,
        token_limit_param="max_completion_tokens",
    )


def call(provider, **request):
    events = list(provider.stream(ChatRequest(model="m", messages=USER, **request)))
    assert isinstance(events[-1], Done)
    return events, events[-1].completion


def chunk(delta=None, finish=None, **fields):
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "chatcmpl-r1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": choices,
        **fields,
    }


# --- parameters a server refuses ---------------------------------------------------------

REFUSALS = {
    "max_completion_tokens": (
        "Unsupported parameter: 'max_completion_tokens' is not supported with this model.",
        {"max_tokens": 50},
    ),
    "stream_options": ("stream_options: Extra inputs are not permitted", {}),
    "temperature": (
        "Unsupported value: 'temperature' does not support 0.2 with this model.",
        {},
    ),
}


@pytest.mark.parametrize("refused", list(REFUSALS))
def test_a_refused_parameter_is_left_out_or_renamed_and_remembered(server, openai_named, refused):
    provider = openai_named
    message, instead = REFUSALS[refused]

    def refusing(body) -> Reply:
        if refused in body:
            return error_reply(400, message)
        return text_reply("Fine.")

    server.responder = refusing
    request = {"max_tokens": 50, "temperature": 0.2}
    _events, completion = call(provider, **request)
    assert completion.content == "Fine."
    assert completion.attempts == 2
    assert refused in completion.note
    first, second = server.requests
    assert refused in first
    assert refused not in second
    for name, value in instead.items():
        assert second[name] == value
    call(provider, **request)
    assert refused not in server.requests[2]  # remembered: asked right at once
    assert len(server.requests) == 3


def test_both_token_limit_names_refused_leaves_the_limit_out(server, openai_named):
    provider = openai_named

    def refusing(body) -> Reply:
        for name in ("max_completion_tokens", "max_tokens"):
            if name in body:
                return error_reply(400, f"Unrecognized request argument supplied: {name}")
        return text_reply("Fine.")

    server.responder = refusing
    _, completion = call(provider, max_tokens=50)
    assert completion.content == "Fine."
    assert [sorted(k for k in r if "tokens" in k) for r in server.requests] == [
        ["max_completion_tokens"],
        ["max_tokens"],
        [],
    ]


@pytest.mark.parametrize(
    ("base_url", "name"),
    [
        (None, "max_completion_tokens"),
        ("https://api.openai.com/v1", "max_completion_tokens"),
        ("https://my-team.openai.azure.com/openai/v1", "max_completion_tokens"),
        ("http://127.0.0.1:8080/v1", "max_tokens"),
        ("https://api.deepseek.com", "max_tokens"),
        ("https://openrouter.ai/api/v1", "max_tokens"),
        ("https://api.openai.com.example.net/v1", "max_tokens"),
    ],
)
def test_the_token_limit_goes_by_the_name_the_server_takes(base_url, name):
    assert token_limit_name(base_url) == name


@pytest.mark.parametrize(
    ("base_url", "local"),
    [
        (None, False),
        ("https://api.openai.com/v1", False),
        ("https://api.deepseek.com", False),
        ("https://openrouter.ai/api/v1", False),
        ("http://127.0.0.1:8080/v1", True),
        ("http://[::1]:8000/v1", True),
        ("http://localhost:11434/v1", True),
        ("http://192.168.1.20:8000/v1", True),
        ("http://10.0.0.5/v1", True),
        ("http://ollama:11434/v1", True),  # a docker-compose service
        ("http://host.docker.internal:11434/v1", True),
        ("http://gpu-box.local:8080/v1", True),
        ("http://8.8.8.8/v1", False),
    ],
)
def test_a_server_on_this_machine_or_network_is_local(base_url, local):
    """A local server gets LLM_LOCAL_MAX_TOKENS when a call sets no limit of its own."""
    assert local_server(base_url) is local


def test_a_local_server_is_sent_max_tokens_which_it_honours(server, provider):
    """llama-cpp-python ignores `max_completion_tokens`: a small model then writes on and on."""
    call(provider, max_tokens=50)
    (sent,) = server.requests
    assert sent["max_tokens"] == 50
    assert "max_completion_tokens" not in sent


def test_a_server_that_wants_the_newer_name_gets_it_next(server, provider):
    def refusing(body) -> Reply:
        if "max_tokens" in body:
            return error_reply(
                400, "Unsupported parameter: 'max_tokens'. Use 'max_completion_tokens' instead."
            )
        return text_reply("Fine.")

    server.responder = refusing
    _, completion = call(provider, max_tokens=50)
    assert completion.content == "Fine."
    assert [r.get("max_completion_tokens") for r in server.requests] == [None, 50]
    call(provider, max_tokens=50)
    assert server.requests[2]["max_completion_tokens"] == 50  # remembered


def test_a_400_about_something_else_is_not_asked_again(server, provider):
    server.push(error_reply(400, "messages[1]: invalid role"))
    with pytest.raises(ProviderError) as caught:
        call(provider, max_tokens=50)
    assert caught.value.attempts == 1
    assert len(server.requests) == 1


# --- tool calls as servers send them -----------------------------------------------------


def test_calls_without_ids_or_with_unusable_ids_get_stable_ids_of_ours(server, provider):
    stream = sse(
        chunk({"role": "assistant"}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "function": {"name": "calculator", "arguments": '{"expression": "1+1"}'},
                    },
                    {
                        "index": 1,
                        "id": "functions.calculator:1",
                        "type": "function",
                        "function": {"name": "calculator", "arguments": {"expression": "2+2"}},
                    },
                ]
            }
        ),
        chunk({}, "stop"),
        "[DONE]",
    )
    server.push(raw_reply(stream), raw_reply(stream))
    _, first = call(provider, tools=TOOLS)
    _, again = call(provider, tools=TOOLS)
    ids = [c.id for c in first.tool_calls]
    assert all(i.startswith("call_") and i.replace("_", "").isalnum() for i in ids)
    assert len(set(ids)) == 2
    assert [c.id for c in again.tool_calls] == ids  # a replay stores the same ids
    assert [json.loads(c.arguments) for c in first.tool_calls] == [
        {"expression": "1+1"},
        {"expression": "2+2"},
    ]
    assert first.finish_reason == "stop"  # as the server said; the calls are still there


def test_tool_call_deltas_without_an_index_are_placed_by_position(server, provider):
    stream = sse(
        chunk(
            {
                "tool_calls": [
                    {
                        "id": "call_x",
                        "type": "function",
                        "function": {"name": "calculator", "arguments": "{}"},
                    }
                ]
            }
        ),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    server.push(raw_reply(stream))
    _, completion = call(provider, tools=TOOLS)
    assert [(c.id, c.name, c.arguments) for c in completion.tool_calls] == [
        ("call_x", "calculator", "{}")
    ]


def test_a_call_whose_id_and_name_come_in_every_chunk_keeps_them_once(server, provider):
    """llama-cpp-python streams a named tool's call so: each chunk repeats its id and name."""

    def piece(arguments):
        call = {
            "index": 0,
            "id": "call__0_record_note_cmpl-1",
            "type": "function",
            "function": {"name": "record_note", "arguments": arguments},
        }
        return chunk({"role": "assistant", "content": None, "tool_calls": [call]})

    stream = sse(
        piece('{"title": '),
        piece('"milk"'),
        piece("}"),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    server.push(raw_reply(stream))
    _, completion = call(provider, tools=TOOLS)
    ((name, arguments),) = [(c.name, c.arguments) for c in completion.tool_calls]
    assert (name, arguments) == ("record_note", '{"title": "milk"}')
    assert len(completion.tool_calls[0].id) < 40  # not three ids joined


# --- usage -------------------------------------------------------------------------------


def test_a_stream_without_usage_reports_none_not_zero(server, provider):
    server.push(raw_reply(sse(chunk({"content": "Hi."}), chunk({}, "stop"), "[DONE]")))
    _, completion = call(provider)
    assert (completion.prompt_tokens, completion.completion_tokens) == (None, None)


def test_the_last_usage_reported_wins_over_a_later_chunk_without_one(server, provider):
    usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    server.push(
        raw_reply(
            sse(
                chunk({"content": "Hi."}),
                chunk({}, "stop"),
                chunk(usage=usage),
                chunk(usage=None),
                "[DONE]",
            )
        )
    )
    _, completion = call(provider)
    assert (completion.prompt_tokens, completion.completion_tokens) == (5, 3)


def test_groqs_streamed_usage_is_read(server, provider):
    groq = {"id": "req_1", "usage": {"prompt_tokens": 20, "completion_tokens": 4}}
    server.push(raw_reply(sse(chunk({"content": "Hi."}), chunk({}, "stop", x_groq=groq), "[DONE]")))
    _, completion = call(provider)
    assert (completion.prompt_tokens, completion.completion_tokens) == (20, 4)


# --- lenient reading -----------------------------------------------------------------------


def test_a_json_answer_to_a_stream_request_is_read_leniently(server, provider):
    body = {
        "id": "chatcmpl-j",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "service_tier": "on_demand",
        "choices": [
            {
                "index": 0,
                "finish_reason": "",
                "message": {
                    "role": "assistant",
                    "content": "",
                    "annotations": [{"type": "url_citation"}],
                    "tool_calls": [
                        {"id": "call_q", "type": "function", "function": {"name": "calculator"}}
                    ],
                },
            }
        ],
    }
    server.push(raw_reply(json.dumps(body).encode(), content_type="application/json"))
    _, completion = call(provider, tools=TOOLS)
    assert [(c.id, c.name, c.arguments) for c in completion.tool_calls] == [
        ("call_q", "calculator", "{}")
    ]
    assert completion.finish_reason == ""
    assert (completion.prompt_tokens, completion.completion_tokens) == (None, None)


@pytest.mark.parametrize("end", ["[DONE]", "closed"])
def test_a_stream_that_ends_without_finish_reason_keeps_its_text(server, provider, end):
    events = [chunk({"role": "assistant", "content": "All "}), chunk({"content": "there."})]
    server.push(raw_reply(sse(*events, "[DONE]") if end == "[DONE]" else sse(*events)))
    events_seen, completion = call(provider)
    assert completion.content == "All there."
    assert "".join(e.text for e in events_seen if isinstance(e, TextDelta)) == "All there."
    assert len(server.requests) == 1


def test_streamed_annotations_without_an_index_do_not_break_the_answer(server, provider):
    note = {"type": "url_citation", "url_citation": {"url": "https://example.org", "title": "x"}}
    server.push(
        raw_reply(
            sse(
                chunk({"content": "Cited.", "annotations": [note]}),
                chunk({"annotations": [note]}),
                chunk({}, "stop"),
                "[DONE]",
            )
        )
    )
    _, completion = call(provider)
    assert completion.content == "Cited."


def test_reasoning_is_kept_on_the_result_and_not_in_the_text(server, provider):
    server.push(
        raw_reply(
            sse(
                chunk({"reasoning_content": "Think "}),
                chunk({"reasoning": "hard."}),
                chunk({"content": "Done."}),
                chunk({}, "stop"),
                "[DONE]",
            )
        )
    )
    events, completion = call(provider)
    assert completion.reasoning == "Think hard."
    assert completion.content == "Done."
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Done."


# --- errors ------------------------------------------------------------------------------


def test_a_4xx_like_error_event_mid_stream_is_told_at_once(server, provider):
    error = {"error": {"message": "Context too long", "type": "invalid_request_error", "code": 400}}
    server.push(
        raw_reply(
            sse(chunk({"content": "Par"}))
            + b"event: error\ndata: "
            + json.dumps(error).encode()
            + b"\n\n"
        )
    )
    with pytest.raises(ProviderError) as caught:
        call(provider)
    assert "Context too long" in str(caught.value)
    assert caught.value.attempts == 1
    assert len(server.requests) == 1


def test_a_5xx_like_error_chunk_mid_stream_is_asked_again(server, provider):
    error = {"error": {"message": "upstream overloaded", "code": 502}}
    server.push(
        raw_reply(sse(chunk({"content": "Par"}), chunk({"content": "t"}, **error))),
        text_reply("Whole."),
    )
    _, completion = call(provider)
    assert completion.content == "Whole."
    assert completion.attempts == 2


def test_a_5xx_refusal_is_not_retried(server, provider):
    server.push(error_reply(500, "Automatic streaming tool choice is not supported"))
    with pytest.raises(ProviderError) as caught:
        call(provider)
    assert "not supported" in str(caught.value)
    assert caught.value.attempts == 1
    assert len(server.requests) == 1


# --- schemas a grammar-constrained server cannot take ------------------------------------

NOTE_TOOL = {
    "type": "function",
    "function": {
        "name": "record_note",
        "parameters": {
            "type": "object",
            "properties": {
                "title": {"type": "string", "maxLength": 255},
                "content": {"type": "string", "maxLength": 20000, "description": "The text."},
                "tags": {
                    "type": "array",
                    "maxItems": 5000,
                    "items": {"type": "string", "maxLength": 4000},
                },
                "maxLength": {"type": "integer", "maximum": 100000},  # a property so named
            },
        },
    },
}


def test_large_bounds_are_told_in_words_and_small_ones_kept():
    (shaped,) = tools_for_model([NOTE_TOOL])
    properties = shaped["function"]["parameters"]["properties"]
    assert properties["title"] == {"type": "string", "maxLength": 255}
    assert properties["content"] == {
        "type": "string",
        "description": "The text. (at most 20000 characters)",
    }
    assert properties["tags"] == {
        "type": "array",
        "description": "(at most 5000 items)",
        "items": {"type": "string", "description": "(at most 4000 characters)"},
    }
    assert properties["maxLength"] == {"type": "integer", "maximum": 100000}
    # The tool's own schema is untouched: its arguments are validated against all of it.
    assert NOTE_TOOL["function"]["parameters"]["properties"]["content"]["maxLength"] == 20000


def test_tools_without_large_bounds_go_as_they_are():
    assert tools_for_model(TOOLS) is TOOLS


def test_the_server_is_offered_the_worded_schema(server, provider):
    call(provider, tools=[NOTE_TOOL], tool_choice="auto")
    (sent,) = server.requests
    content = sent["tools"][0]["function"]["parameters"]["properties"]["content"]
    assert "maxLength" not in content
    assert content["description"].endswith("(at most 20000 characters)")


@pytest.mark.parametrize(
    ("status", "words", "refused"),
    [
        (400, "Invalid content type. image_url is only supported by certain models.", True),
        (400, "The model `qwen3` is not a multimodal model", True),
        (500, "image input is not supported - hint: you may need to provide the mmproj", True),
        (400, "llava does not support images", True),
        (400, "Image too large: the image exceeds 20 MB", False),
        (400, "Could not download the image from the URL", False),
        (400, "messages[0].content must be a string", False),
        (503, "image service overloaded, try later", False),
        # A broken image, or a URL whose words say "image", is no refusal of images: one
        # person's upload must not switch images off for everyone using the model.
        (400, "You uploaded an unsupported image. Please make sure your image is valid.", False),
        (400, "Error while downloading https://x.example/not-a-multimodal-model/image.png", False),
        (400, "Failed to load image from http://images.example.com/vision/a.png", False),
        (400, "This model does not support image input.", True),
        (400, "Vision is not supported by this model", True),
    ],
)
def test_an_error_refuses_images_only_when_its_words_say_so(status, words, refused):
    assert image_input_refused(status, words) is refused


def test_a_model_that_refused_images_is_told_of_earlier_ones_in_words(server, provider):
    server.push(
        error_reply(400, "Invalid content type. image_url is only supported by certain models.")
    )
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    asked = {"role": "user", "content": [{"type": "text", "text": "what?"}, image]}
    request = ChatRequest(model="test-model", messages=[asked])
    with pytest.raises(ProviderError, match="The model openai/test-model does not accept images"):
        list(provider.stream(request))
    # Asked again with that image as the question: refused without a request.
    with pytest.raises(ProviderError, match="refused images before"):
        list(provider.stream(request))
    assert len(server.requests) == 1
    # As history, it is said in words.
    server.push(text_reply("hi"))
    later = [asked, {"role": "assistant", "content": "?"}, {"role": "user", "content": "hi"}]
    events = list(provider.stream(ChatRequest(model="test-model", messages=later)))
    assert isinstance(events[-1], Done)
    assert server.requests[-1]["messages"][0]["content"][1] == {
        "type": "text",
        "text": "[an image this model cannot be shown]",
    }
