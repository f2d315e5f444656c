"""Clients no one here wrote, through /v1/responses on a real uvicorn.

The openai SDK's `responses` (create, its stream helper, `create(stream=True)`,
retrieve, delete) against the scripted model server and the embedded offline
model, and pydantic-ai's OpenAIResponsesModel with a tool of its own. What
the clients parse is what toolchat means: its own tools' calls as `mcp_call`
items, the client's as `function_call`s it answers, usage, and another
user's response a 404.
"""

from __future__ import annotations

import json

import openai
import pytest
from openai import OpenAI
from rest_framework.authtoken.models import Token

from chat.models import Conversation, ExecutionStatus, ToolExecution
from chat.selectors import history_for_model
from tests.assertions import assert_valid_history
from tests.factories import UserFactory
from tests.llm_server import text_reply, tool_calls_reply

pytestmark = pytest.mark.postgres

MODEL = "openai/test-model"
LOOKUP = {
    "type": "function",
    "name": "lookup_order",
    "description": "Look an order up in the client's own system.",
    "parameters": {
        "type": "object",
        "properties": {"order": {"type": "string"}},
        "required": ["order"],
    },
}


def _clients(base_url: str) -> tuple[OpenAI, OpenAI, object]:
    mine, theirs = UserFactory(), UserFactory()
    keys = [Token.objects.create(user=user).key for user in (mine, theirs)]
    client, other = (OpenAI(base_url=f"{base_url}/v1", api_key=k, max_retries=0) for k in keys)
    return client, other, mine


def test_the_openai_sdk_sees_server_calls_client_calls_usage_and_the_stored_response(
    scripted_server, llm_server
):
    client, other, owner = _clients(scripted_server)
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "6*7"}', "call_calc")]),
        text_reply("6 times 7 is 42."),
        tool_calls_reply([("lookup_order", '{"order": "A-1"}', "call_lookup")]),
        text_reply("Order A-1 has 3 items."),
    )
    first = client.responses.create(model=MODEL, input="What is 6*7?", instructions="Be brief.")
    assert first.status == "completed"
    assert [item.type for item in first.output] == ["mcp_call", "message"]
    assert (first.output[0].name, first.output[0].server_label) == ("calculator", "toolchat")
    assert first.output_text == "6 times 7 is 42."
    assert first.usage.total_tokens == first.usage.input_tokens + first.usage.output_tokens > 0

    second = client.responses.create(
        model=MODEL, input="And order A-1?", tools=[LOOKUP], previous_response_id=first.id
    )
    (call,) = second.output
    assert (call.type, call.name, json.loads(call.arguments)) == (
        "function_call",
        "lookup_order",
        {"order": "A-1"},
    )
    third = client.responses.create(
        model=MODEL,
        previous_response_id=second.id,
        tools=[LOOKUP],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "3 items"}],
    )
    assert third.output_text == "Order A-1 has 3 items."

    assert client.responses.retrieve(third.id).output_text == third.output_text
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(third.id)
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    (conversation,) = Conversation.objects.filter(owner=owner)
    statuses = dict(
        ToolExecution.objects.filter(run__conversation=conversation).values_list("name", "status")
    )
    assert statuses == {
        "calculator": ExecutionStatus.SUCCEEDED,
        "lookup_order": ExecutionStatus.SUCCEEDED,
    }
    assert_valid_history(history_for_model(conversation=conversation))


def test_the_openai_sdk_streams_text_server_calls_and_client_calls_in_sequence(
    scripted_server, llm_server
):
    client, _, _ = _clients(scripted_server)
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "6*7"}', "call_calc")]),
        text_reply("6 times 7 is 42."),
        tool_calls_reply([("lookup_order", '{"order": "A-1"}', "call_lookup")]),
    )
    with client.responses.stream(model=MODEL, input="What is 6*7?") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert "response.output_text.delta" in kinds
    for kind in ("output_item", "content_part", "output_text"):
        assert f"response.{kind}.done" in kinds
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == final.output_text == "6 times 7 is 42."
    assert [item.type for item in final.output] == ["mcp_call", "message"]

    streamed = list(
        client.responses.create(
            model=MODEL,
            input="And order A-1?",
            tools=[LOOKUP],
            previous_response_id=final.id,
            stream=True,
        )
    )
    kinds = [event.type for event in streamed]
    assert "response.function_call_arguments.delta" in kinds
    done = next(e for e in streamed if e.type == "response.function_call_arguments.done")
    assert json.loads(done.arguments) == {"order": "A-1"}
    assert streamed[-1].type == "response.completed"
    assert streamed[-1].response.output[-1].type == "function_call"


def test_the_openai_sdk_with_the_embedded_offline_model(asgi_server):
    client, _, owner = _clients(asgi_server)
    answer = client.responses.create(model="offline/offline", input="What is 12*7?")
    assert answer.status == "completed"
    assert answer.output_text
    with client.responses.stream(
        model="offline/offline", input="Thanks. And 2+2?", previous_response_id=answer.id
    ) as stream:
        final = stream.get_final_response()
    assert final.status == "completed"
    assert final.output_text
    assert Conversation.objects.filter(owner=owner).count() == 1


def test_pydantic_ai_responses_model_runs_a_tool_of_its_own(scripted_server, llm_server):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    _, _, owner = _clients(scripted_server)
    token = Token.objects.get(user=owner).key
    provider = OpenAIProvider(base_url=f"{scripted_server}/v1", api_key=token)
    agent = Agent(OpenAIResponsesModel(MODEL, provider=provider))

    @agent.tool_plain
    def lookup_order(order: str) -> str:
        """Look an order up in the client's own system."""
        return json.dumps({"order": order, "items": 3})

    llm_server.push(
        tool_calls_reply([("lookup_order", '{"order": "A-1"}', "call_lookup")]),
        text_reply("Order A-1 has 3 items."),
    )
    result = agent.run_sync("How many items are in order A-1?")
    assert result.output == "Order A-1 has 3 items."
    (conversation,) = Conversation.objects.filter(owner=owner)
    execution = ToolExecution.objects.get(run__conversation=conversation, name="lookup_order")
    assert execution.status == ExecutionStatus.SUCCEEDED
