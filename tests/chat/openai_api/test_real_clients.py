"""Clients no one here wrote, from their own packages, against toolchat on a real uvicorn.

The official openai SDK (sync, async, streaming), pydantic-ai and
langchain-openai each hold a multi-turn conversation through /v1: a question
that toolchat answers with its own tool (server side), then one that needs the
client's own tool (returned as `tool_calls`, run by the client, sent back).
What was stored is checked: one conversation per client conversation, both
kinds of call on the audit, a valid history, and nothing of it for another
user's token.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

import openai
import pytest
from openai import OpenAI
from rest_framework.authtoken.models import Token

from chat.models import Conversation, ExecutionStatus, ToolExecution
from chat.selectors import history_for_model
from tests.assertions import assert_valid_history
from tests.clients.sdk import async_openai
from tests.factories import UserFactory
from tests.llm_server import error_reply, text_reply, tool_calls_reply

pytestmark = pytest.mark.postgres

MODEL = "openai/test-model"


def lookup_order(order: str) -> str:
    """Look an order up in the client's own system."""
    return json.dumps({"order": order, "items": 3})


LOOKUP_TOOL = {
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


@pytest.fixture
def accounts(scripted_server):
    """Two users' tokens, and the server's /v1 base URL."""
    mine, theirs = UserFactory(), UserFactory()
    return (
        f"{scripted_server}/v1",
        Token.objects.create(user=mine).key,
        Token.objects.create(user=theirs).key,
        mine,
        theirs,
    )


def script_two_turns(llm_server):
    """Turn 1: toolchat's calculator, then an answer. Turn 2: the client's tool, then an answer."""
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "6*7"}', "call_calc")]),
        text_reply("6 times 7 is 42."),
        tool_calls_reply([("lookup_order", '{"order": "A-1"}', "call_lookup")]),
        text_reply("Order A-1 has 3 items."),
    )


def assert_stored(owner, other_token, base_url):
    """One conversation holding both kinds of call, valid; another user sees none of it."""
    (conversation,) = Conversation.objects.filter(owner=owner)
    statuses = dict(
        ToolExecution.objects.filter(run__conversation=conversation).values_list("name", "status")
    )
    assert statuses == {"calculator": ExecutionStatus.SUCCEEDED, "lookup_order": "succeeded"}
    client_call = ToolExecution.objects.get(name="lookup_order")
    assert json.loads(client_call.content) == {"order": "A-1", "items": 3}
    assert_valid_history(history_for_model(conversation=conversation))
    other = OpenAI(base_url=base_url, api_key=other_token, max_retries=0)
    assert [m.id for m in other.models.list()] == [MODEL]
    request = urllib.request.Request(
        base_url.replace("/v1", "/api/v1/conversations/"),
        headers={"Authorization": f"Token {other_token}"},
    )
    with urllib.request.urlopen(request) as response:
        assert json.loads(response.read())["results"] == []


def test_the_openai_sdk_holds_a_conversation_with_both_kinds_of_tool(accounts, llm_server):
    base_url, token, other_token, owner, _ = accounts
    script_two_turns(llm_server)
    client = OpenAI(base_url=base_url, api_key=token, max_retries=0)
    messages = [{"role": "user", "content": "What is 6*7?"}]
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages)
    first = raw.parse()
    assert first.choices[0].message.content == "6 times 7 is 42."
    assert raw.headers["x-toolchat-run-id"]
    assert first.usage is not None
    assert first.usage.total_tokens > 0

    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And how many items are in order A-1?"},
    ]
    second = client.chat.completions.create(model=MODEL, messages=messages, tools=[LOOKUP_TOOL])
    choice = second.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append(
        {
            "role": "tool",
            "tool_call_id": call.id,
            "content": lookup_order(**json.loads(call.function.arguments)),
        }
    )
    third = client.chat.completions.create(model=MODEL, messages=messages, tools=[LOOKUP_TOOL])
    assert third.choices[0].message.content == "Order A-1 has 3 items."
    assert_stored(owner, other_token, base_url)


def test_the_async_openai_sdk_streams_with_usage_and_client_tool_calls(accounts, llm_server):
    base_url, token, other_token, owner, _ = accounts
    script_two_turns(llm_server)

    async def converse():
        client = async_openai(base_url=base_url, api_key=token, max_retries=0)
        messages = [{"role": "user", "content": "What is 6*7?"}]
        text, usage = [], None
        stream = await client.chat.completions.create(
            model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text.append(chunk.choices[0].delta.content)
            if chunk.usage is not None:
                usage = chunk.usage
        assert "".join(text) == "6 times 7 is 42."
        assert usage is not None
        assert usage.total_tokens > 0

        messages += [
            {"role": "assistant", "content": "".join(text)},
            {"role": "user", "content": "And how many items are in order A-1?"},
        ]
        # The SDK's own stream helper accumulates the client's calls.
        async with client.chat.completions.stream(
            model=MODEL, messages=messages, tools=[LOOKUP_TOOL]
        ) as stream:
            final = await stream.get_final_completion()
        choice = final.choices[0]
        assert choice.finish_reason == "tool_calls"
        (call,) = choice.message.tool_calls
        messages.append(
            {
                "role": "assistant",
                "content": choice.message.content,
                "tool_calls": [call.model_dump(exclude_none=True)],
            }
        )
        messages.append(
            {"role": "tool", "tool_call_id": call.id, "content": lookup_order(order="A-1")}
        )
        third = await client.chat.completions.create(
            model=MODEL, messages=messages, tools=[LOOKUP_TOOL]
        )
        assert third.choices[0].message.content == "Order A-1 has 3 items."

    asyncio.run(converse())
    assert_stored(owner, other_token, base_url)


def test_pydantic_ai_holds_a_conversation_with_a_tool_of_its_own(accounts, llm_server):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    base_url, token, other_token, owner, _ = accounts
    script_two_turns(llm_server)
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=base_url, api_key=token))
    agent = Agent(model)
    agent.tool_plain(lookup_order)
    first = agent.run_sync("What is 6*7?")
    assert first.output == "6 times 7 is 42."
    second = agent.run_sync(
        "And how many items are in order A-1?", message_history=first.all_messages()
    )
    assert second.output == "Order A-1 has 3 items."
    assert_stored(owner, other_token, base_url)


def test_langchain_openai_holds_a_conversation_with_a_tool_of_its_own(accounts, llm_server):
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    base_url, token, other_token, owner, _ = accounts
    script_two_turns(llm_server)
    chat = ChatOpenAI(model=MODEL, base_url=base_url, api_key=token, max_retries=0)
    history = [HumanMessage("What is 6*7?")]
    answer = chat.invoke(history)
    assert answer.content == "6 times 7 is 42."
    history += [answer, HumanMessage("And how many items are in order A-1?")]
    with_tools = chat.bind_tools([LOOKUP_TOOL])
    asked = with_tools.invoke(history)
    (call,) = asked.tool_calls
    history += [asked, ToolMessage(lookup_order(**call["args"]), tool_call_id=call["id"])]
    final = with_tools.invoke(history)
    assert final.content == "Order A-1 has 3 items."
    assert_stored(owner, other_token, base_url)


def test_a_failed_turn_reaches_the_sdk_as_an_error_streamed_or_not(accounts, llm_server):
    base_url, token, _, owner, _ = accounts
    llm_server.push(error_reply(400, "context too long"), error_reply(400, "context too long"))
    client = OpenAI(base_url=base_url, api_key=token, max_retries=0)
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(model=MODEL, messages=messages)
    assert failed.value.status_code == 502
    assert failed.value.body["code"] == "run_failed"
    assert "context too long" in failed.value.message
    # Streamed, the 200 has gone out: the error arrives as the stream's last event.
    stream = client.chat.completions.create(model=MODEL, messages=messages, stream=True)
    with pytest.raises(openai.APIError, match="context too long"):
        for _ in stream:
            pass
    # The same request again is a retry of the failed turn, in the same conversation.
    (conversation,) = Conversation.objects.filter(owner=owner)
    assert list(conversation.runs.values_list("status", flat=True)) == ["failed", "failed"]
