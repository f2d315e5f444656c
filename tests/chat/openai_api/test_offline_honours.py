"""The embedded offline model honours a /v1 request, through real clients on a real uvicorn.

Structured output (the openai SDK's `parse`, pydantic-ai's `output_type`,
LangChain's `with_structured_output`), `json_object`, `tool_choice` (none,
required, a named function), `max_tokens` and `stop`, on a fresh machine's
model: what each client gets back is checked as that client checks it.
"""

from __future__ import annotations

import json
from enum import StrEnum

import pytest
from openai import OpenAI
from pydantic import BaseModel
from rest_framework.authtoken.models import Token

from chat.llm.offline import token_count
from tests.factories import UserFactory

pytestmark = pytest.mark.postgres

MODEL = "offline/offline"
LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look an order up in the client's own system.",
        "parameters": {
            "type": "object",
            "properties": {"order": {"type": "string"}},
            "required": ["order"],
        },
    },
}


class Confidence(StrEnum):
    low = "low"
    high = "high"


class Step(BaseModel):
    description: str
    value: float


class Calculation(BaseModel):
    answer: str
    value: int
    confidence: Confidence
    steps: list[Step]
    remark: str | None


@pytest.fixture
def base_url_and_token(asgi_server):
    return f"{asgi_server}/v1", Token.objects.create(user=UserFactory()).key


@pytest.fixture
def client(base_url_and_token):
    base_url, token = base_url_and_token
    return OpenAI(base_url=base_url, api_key=token, max_retries=0)


def ask(client, content, **options):
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": content}], **options
    )


def test_parse_with_a_pydantic_model_gets_an_object_that_validates(client):
    completion = client.chat.completions.parse(
        model=MODEL,
        messages=[{"role": "user", "content": "What is 6*7?"}],
        response_format=Calculation,
    )
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Calculation)
    assert parsed.value == 42  # from the calculator toolchat ran
    assert "42" in parsed.answer
    assert completion.choices[0].finish_reason == "stop"


def test_json_object_is_answered_with_json(client):
    answer = ask(client, "What is 2+3?", response_format={"type": "json_object"})
    body = json.loads(answer.choices[0].message.content)
    assert isinstance(body, dict)
    assert "5" in json.dumps(body)


def test_tool_choice_none_calls_no_tool(client):
    answer = ask(client, "Look up order A-1.", tools=[LOOKUP], tool_choice="none")
    assert answer.choices[0].finish_reason == "stop"
    assert not answer.choices[0].message.tool_calls
    assert answer.choices[0].message.content


def test_tool_choice_auto_calls_the_tool_the_words_ask_for(client):
    answer = ask(client, "Look up order A-1.", tools=[LOOKUP], tool_choice="auto")
    (call,) = answer.choices[0].message.tool_calls
    assert call.function.name == "lookup_order"


def test_tool_choice_required_calls_a_tool_when_the_words_ask_for_none(client):
    answer = ask(client, "Hello there!", tools=[LOOKUP], tool_choice="required")
    assert answer.choices[0].finish_reason == "tool_calls"
    (call,) = answer.choices[0].message.tool_calls
    assert call.function.name == "lookup_order"
    assert isinstance(json.loads(call.function.arguments)["order"], str)


def test_a_named_function_is_the_one_called(client):
    answer = ask(
        client,
        "What is 6*7?",  # the words ask for the calculator
        tools=[LOOKUP],
        tool_choice={"type": "function", "function": {"name": "lookup_order"}},
    )
    (call,) = answer.choices[0].message.tool_calls
    assert call.function.name == "lookup_order"
    assert set(json.loads(call.function.arguments)) == {"order"}


def test_max_tokens_ends_the_answer_with_finish_reason_length(client):
    full = ask(client, "Hello there!").choices[0].message.content
    assert token_count(full) > 4
    cut = ask(client, "Hello there!", max_tokens=4).choices[0]
    assert cut.finish_reason == "length"
    assert token_count(cut.message.content) == 4
    assert full.startswith(cut.message.content)

    streamed = list(ask(client, "Hello there!", max_tokens=4, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    finishes = [c.choices[0].finish_reason for c in streamed if c.choices]
    assert text == cut.message.content
    assert finishes[-1] == "length"


def test_stop_ends_the_answer_before_the_stop_sequence(client):
    full = ask(client, "Hello there!").choices[0].message.content
    words = full.split()
    assert len(words) > 3
    stop = words[2]
    answer = ask(client, "Hello there!", stop=[stop, "never-said"]).choices[0]
    assert answer.finish_reason == "stop"
    assert answer.message.content == full[: full.index(stop)]


def test_pydantic_ai_with_an_output_type_gets_a_validated_object(base_url_and_token):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    base_url, token = base_url_and_token
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=base_url, api_key=token))
    result = Agent(model, output_type=Calculation).run_sync("What is 6*7?")
    assert isinstance(result.output, Calculation)
    assert result.output.value == 42


def test_langchains_with_structured_output_gets_a_validated_object(base_url_and_token):
    from langchain_openai import ChatOpenAI

    base_url, token = base_url_and_token
    chat = ChatOpenAI(model=MODEL, base_url=base_url, api_key=token, max_retries=0)
    answer = chat.with_structured_output(Calculation, method="json_schema").invoke("What is 6*7?")
    assert isinstance(answer, Calculation)
    assert answer.value == 42  # toolchat ran its calculator, then the model answered
    # As a function to call, named in tool_choice: called at once, with no tool run first.
    called = chat.with_structured_output(Calculation, method="function_calling").invoke(
        "What is 6*7?"
    )
    assert isinstance(called, Calculation)
