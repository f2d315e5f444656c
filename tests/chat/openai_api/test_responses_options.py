"""A /v1/responses request's options reach the model as a completion's do, and its response echoes them.

What the model was sent is read at the scripted server (tests/llm_server.py);
the offline model's structured output, tool choice and token limit are checked
through the openai SDK's `responses.parse`, pydantic-ai's
OpenAIResponsesModel with an `output_type` and LangChain's
`with_structured_output` on its Responses API, on a real uvicorn.
"""

from __future__ import annotations

import json

import pytest
from openai import OpenAI
from pydantic import BaseModel
from rest_framework.authtoken.models import Token

from chat.models import Conversation, Run
from tests.factories import UserFactory
from tests.llm_server import text_reply, tool_calls_reply

MODEL = "openai/test-model"
URL = "/v1/responses"
LOOKUP = {
    "type": "function",
    "name": "lookup_order",
    "description": "Look an order up in the client's own system.",
    "parameters": {"type": "object", "properties": {"order": {"type": "string"}}},
    "strict": False,
}
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "value": {"type": "integer"}},
    "required": ["answer", "value"],
    "additionalProperties": False,
}


def create(client, **fields):
    return client.post(URL, json.dumps({"model": MODEL, **fields}), content_type="application/json")


@pytest.mark.django_db(transaction=True)
def test_every_option_reaches_every_model_call_and_is_echoed(v1, llm_server):
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "6*7"}', "call_calc")]),
        text_reply('{"answer": "42", "value": 42}'),
    )
    text_format = {"type": "json_schema", "name": "answer", "schema": ANSWER_SCHEMA, "strict": True}
    response = create(
        v1,
        input="What is 6*7?",
        tools=[LOOKUP],
        temperature=0.3,
        top_p=0.8,
        parallel_tool_calls=False,
        max_output_tokens=200,
        tool_choice="auto",
        text={"format": text_format, "verbosity": "low"},
        reasoning={"effort": "low"},
        metadata={"ticket": "T-9"},
        service_tier="auto",
        prompt_cache_key="tenant-7",
        safety_identifier="user-hash",
        user="customer-7",
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert len(llm_server.requests) == 2
    for sent in llm_server.requests:
        assert (sent["temperature"], sent["top_p"]) == (0.3, 0.8)
        assert sent["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA, "strict": True},
        }
        assert sent.get("max_completion_tokens", sent.get("max_tokens")) == 200
        assert (sent["verbosity"], sent["reasoning_effort"]) == ("low", "low")
        assert (sent["service_tier"], sent["prompt_cache_key"]) == ("auto", "tenant-7")
        assert (sent["safety_identifier"], sent["user"]) == ("user-hash", "customer-7")
        assert (sent["tool_choice"], sent["parallel_tool_calls"]) == ("auto", False)
    assert body["output"][-1]["content"][0]["text"] == '{"answer": "42", "value": 42}'
    echoed = {key: body[key] for key in ("temperature", "top_p", "max_output_tokens")}
    assert echoed == {"temperature": 0.3, "top_p": 0.8, "max_output_tokens": 200}
    assert (body["parallel_tool_calls"], body["tool_choice"]) == (False, "auto")
    assert body["text"] == {"format": text_format, "verbosity": "low"}
    assert body["metadata"] == {"ticket": "T-9"}
    assert body["reasoning"] == {"effort": "low", "summary": None}
    assert (body["service_tier"], body["prompt_cache_key"]) == ("auto", "tenant-7")
    assert body["tools"] == [{**LOOKUP}]
    run = Run.objects.get(pk=response["X-Toolchat-Run-Id"])
    assert run.client_options["metadata"] == {"ticket": "T-9"}
    assert v1.get(f"{URL}/{body['id']}").json() == body


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("choice", "sent"),
    [
        (
            {"type": "function", "name": "lookup_order"},
            {"type": "function", "function": {"name": "lookup_order"}},
        ),
        (
            {"type": "mcp", "server_label": "toolchat", "name": "calculator"},
            {"type": "function", "function": {"name": "calculator"}},
        ),
        ({"type": "mcp", "server_label": "toolchat"}, "required"),
        ("none", "none"),
    ],
)
def test_tool_choice_is_sent_as_chat_completions_names_it_and_echoed_as_given(
    v1, llm_server, choice, sent
):
    llm_server.push(text_reply("Done."))
    response = create(v1, input="Look up A-1.", tools=[LOOKUP], tool_choice=choice)
    assert response.status_code == 200, response.json()
    assert llm_server.requests[0]["tool_choice"] == sent
    assert response.json()["tool_choice"] == choice


@pytest.mark.django_db(transaction=True)
def test_unset_options_are_not_sent_and_echo_the_specifications_defaults(v1, llm_server):
    llm_server.push(text_reply("Hi."))
    body = create(v1, input="Hi").json()
    (sent,) = llm_server.requests
    for name in (
        "temperature",
        "top_p",
        "response_format",
        "parallel_tool_calls",
        "user",
    ):
        assert name not in sent
    assert (body["temperature"], body["top_p"], body["tool_choice"]) == (1.0, 1.0, "auto")
    assert (body["text"], body["parallel_tool_calls"]) == ({"format": {"type": "text"}}, True)
    assert (body["metadata"], body["max_output_tokens"], body["reasoning"]) == ({}, None, None)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"text": "json"}, "text"),
        ({"text": {"format": "json"}}, "text.format"),
        ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
        (
            {"text": {"format": {"type": "json_schema", "schema": ANSWER_SCHEMA}}},
            "text.format.name",
        ),
        (
            {"text": {"format": {"type": "json_schema", "name": "a b", "schema": {}}}},
            "text.format.name",
        ),
        ({"text": {"format": {"type": "json_schema", "name": "a"}}}, "text.format.schema"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"tool_choice": {"type": "function", "name": "nowhere"}}, "tool_choice.name"),
        ({"tool_choice": {"type": "mcp", "server_label": "elsewhere"}}, "tool_choice"),
        (
            {"tool_choice": {"type": "mcp", "server_label": "toolchat", "name": "nope"}},
            "tool_choice.name",
        ),
        ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
        ({"parallel_tool_calls": "no"}, "parallel_tool_calls"),
        ({"temperature": 3}, "temperature"),
        ({"top_p": -0.1}, "top_p"),
        ({"max_output_tokens": "many"}, "max_output_tokens"),
        ({"metadata": [1]}, "metadata"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({"metadata": {"n": 3}}, "metadata.n"),
        ({"metadata": {"k" * 65: "v"}}, "metadata"),
        ({"reasoning": "high"}, "reasoning"),
        ({"reasoning": {"effort": 1}}, "reasoning_effort"),
    ],
)
def test_a_bad_option_is_a_400_naming_it_and_stores_nothing(v1, llm_server, fields, param):
    response = create(v1, input="hi", **fields)
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param), error
    assert param.split(".")[0].split("[")[0] in error["message"]
    assert not Conversation.objects.exists()
    assert not llm_server.requests


class Calculation(BaseModel):
    answer: str
    value: int


@pytest.fixture
def offline(asgi_server):
    token = Token.objects.create(user=UserFactory()).key
    return f"{asgi_server}/v1", token


@pytest.mark.postgres
def test_the_openai_sdks_parse_gets_an_object_from_the_offline_model(offline):
    base_url, token = offline
    client = OpenAI(base_url=base_url, api_key=token, max_retries=0)
    response = client.responses.parse(
        model="offline/offline", input="What is 6*7?", text_format=Calculation
    )
    assert response.status == "completed"
    parsed = response.output_parsed
    assert isinstance(parsed, Calculation)
    assert parsed.value == 42
    assert response.text.format.type == "json_schema"


@pytest.mark.postgres
def test_max_output_tokens_cuts_the_answer_as_incomplete(offline):
    base_url, token = offline
    client = OpenAI(base_url=base_url, api_key=token, max_retries=0)
    response = client.responses.create(
        model="offline/offline",
        input="Tell me a long story about a lighthouse keeper and the sea.",
        max_output_tokens=16,
    )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output[-1].status == "incomplete"
    assert response.max_output_tokens == 16
    with client.responses.stream(
        model="offline/offline",
        input="And another long story about a baker.",
        max_output_tokens=16,
        previous_response_id=response.id,
    ) as stream:
        events = list(stream)
    # The SDK's stream helper keeps only a `response.completed` as its final response.
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"


@pytest.mark.postgres
def test_pydantic_ai_responses_model_with_an_output_type(offline):
    from pydantic_ai import Agent, NativeOutput
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    base_url, token = offline
    provider = OpenAIProvider(base_url=base_url, api_key=token)
    model = OpenAIResponsesModel("offline/offline", provider=provider)
    tool_output = Agent(model, output_type=Calculation).run_sync("What is 6*7?")
    assert isinstance(tool_output.output, Calculation)
    assert tool_output.output.value == 42
    native = Agent(model, output_type=NativeOutput(Calculation)).run_sync("What is 6*7?")
    assert isinstance(native.output, Calculation)
    assert native.output.value == 42


@pytest.mark.postgres
def test_langchains_with_structured_output_on_the_responses_api(offline):
    from langchain_openai import ChatOpenAI

    base_url, token = offline
    chat = ChatOpenAI(
        model="offline/offline",
        base_url=base_url,
        api_key=token,
        max_retries=0,
        use_responses_api=True,
    )
    answer = chat.with_structured_output(Calculation, method="json_schema").invoke("What is 6*7?")
    assert isinstance(answer, Calculation)
    assert answer.value == 42  # toolchat ran its calculator, then the model answered
    # As a function to call, named in tool_choice: a function_call item LangChain parses.
    called = chat.with_structured_output(Calculation, method="function_calling").invoke(
        "What is 6*7?"
    )
    assert isinstance(called, Calculation)
