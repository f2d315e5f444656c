"""The Conversations API (/v1/conversations) over toolchat's stored conversations.

Through the real openai SDK (`conversations.create`, `.items.list`,
`.items.create`, `responses.create(conversation=...)`) on a real uvicorn, and
the openai-agents SDK's `Runner.run(conversation_id=...)`: a conversation made
with items of the client's past is the toolchat conversation a response
naming it continues, its items are what was said and called, and another
user's is a 404. Bad input is an OpenAI 400 naming the field, with nothing
stored.
"""

from __future__ import annotations

import json

import openai
import pytest
from openai import OpenAI
from rest_framework.authtoken.models import Token

from chat.models import Conversation, ExecutionStatus, Message, Source, ToolExecution
from chat.selectors import history_for_model
from tests.assertions import assert_valid_history
from tests.clients.sdk import async_openai
from tests.factories import UserFactory
from tests.llm_server import text_reply, tool_calls_reply

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
PAST = [
    {"type": "message", "role": "user", "content": "My order is A-1."},
    {"type": "message", "role": "assistant", "content": "Noted: order A-1."},
]


def _clients(base_url: str):
    mine, theirs = UserFactory(), UserFactory()
    keys = [Token.objects.create(user=user).key for user in (mine, theirs)]
    client, other = (OpenAI(base_url=f"{base_url}/v1", api_key=k, max_retries=0) for k in keys)
    return client, other, mine


def _texts(items) -> list[tuple[str, str]]:
    return [(item.role, item.content[0].text) for item in items if item.type == "message"]


@pytest.mark.postgres
def test_a_conversation_made_with_items_is_continued_by_responses_that_name_it(
    scripted_server, llm_server
):
    client, other, owner = _clients(scripted_server)
    made = client.conversations.create(items=PAST, metadata={"topic": "orders"})
    assert made.id.startswith("conv_")
    assert made.metadata == {"topic": "orders"}
    assert client.conversations.retrieve(made.id).id == made.id
    with pytest.raises(openai.NotFoundError):
        other.conversations.retrieve(made.id)
    page = client.conversations.items.list(made.id, order="asc")
    assert _texts(page.data) == [("user", "My order is A-1."), ("assistant", "Noted: order A-1.")]

    llm_server.push(
        tool_calls_reply([("lookup_order", '{"order": "A-1"}', "call_lookup")]),
        text_reply("Order A-1 has 3 items."),
    )
    first = client.responses.create(
        model=MODEL, input="How many items are in it?", tools=[LOOKUP], conversation=made.id
    )
    assert first.conversation is not None
    assert first.conversation.id == made.id
    (call,) = first.output
    assert (call.type, call.name) == ("function_call", "lookup_order")
    # The model was sent the conversation's past before the new question.
    sent = [(m["role"], m.get("content")) for m in llm_server.requests[0]["messages"]]
    assert ("user", "My order is A-1.") in sent
    assert ("assistant", "Noted: order A-1.") in sent
    second = client.responses.create(
        model=MODEL,
        tools=[LOOKUP],
        conversation={"id": made.id},
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "3 items"}],
    )
    assert second.output_text == "Order A-1 has 3 items."

    (conversation,) = Conversation.objects.filter(owner=owner)
    assert conversation.source == Source.V1
    assert conversation.title == "My order is A-1."
    execution = ToolExecution.objects.get(run__conversation=conversation)
    assert execution.status == ExecutionStatus.SUCCEEDED
    assert_valid_history(history_for_model(conversation=conversation))

    items = list(client.conversations.items.list(made.id, order="asc"))
    assert [item.type for item in items] == [
        "message",
        "message",
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert items[3].call_id == call.call_id
    assert items[4].output == "3 items"
    assert _texts(items)[-1] == ("assistant", "Order A-1 has 3 items.")
    newest = client.conversations.items.list(made.id, limit=2)  # desc, the default
    assert [item.id for item in newest.data] == [items[5].id, items[4].id]
    assert newest.has_more is True
    after = client.conversations.items.list(made.id, limit=2, after=items[4].id)
    assert [item.id for item in after.data] == [items[3].id, items[2].id]
    one = client.conversations.items.retrieve(items[2].id, conversation_id=made.id)
    assert one.content[0].text == "How many items are in it?"
    with pytest.raises(openai.NotFoundError):
        other.conversations.items.list(made.id)

    added = client.conversations.items.create(
        made.id, items=[{"type": "message", "role": "user", "content": "Thanks."}]
    )
    assert _texts(added.data) == [("user", "Thanks.")]
    assert Message.objects.filter(conversation=conversation).count() == 7

    updated = client.conversations.update(made.id, metadata={"topic": "done"})
    assert updated.metadata == {"topic": "done"}
    with pytest.raises(openai.NotFoundError):
        other.conversations.delete(made.id)
    assert client.conversations.delete(made.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(made.id)
    assert not Conversation.objects.filter(owner=owner).exists()


@pytest.mark.postgres
def test_the_agents_sdk_holds_a_conversation_by_its_id(scripted_server, llm_server):
    agents = pytest.importorskip("agents")
    owner = UserFactory()
    client = async_openai(
        base_url=f"{scripted_server}/v1",
        api_key=Token.objects.create(user=owner).key,
        max_retries=0,
    )
    agents.set_tracing_disabled(True)
    looked_up: list[str] = []

    @agents.function_tool
    def lookup_order(order: str) -> str:
        """Look an order up in the client's own system."""
        looked_up.append(order)
        return json.dumps({"order": order, "items": 3})

    model = agents.OpenAIResponsesModel(model=MODEL, openai_client=client)
    agent = agents.Agent(name="Orders", instructions="Be brief.", model=model, tools=[lookup_order])
    sync = OpenAI(base_url=f"{scripted_server}/v1", api_key=client.api_key, max_retries=0)
    made = sync.conversations.create()
    llm_server.push(
        tool_calls_reply([("lookup_order", '{"order": "C-3"}', "call_lookup")]),
        text_reply("Order C-3 has 3 items."),
        text_reply("That was order C-3."),
    )
    first = agents.Runner.run_sync(agent, "How many items in C-3?", conversation_id=made.id)
    assert first.final_output == "Order C-3 has 3 items."
    assert looked_up == ["C-3"]
    second = agents.Runner.run_sync(agent, "Which order was it?", conversation_id=made.id)
    assert second.final_output == "That was order C-3."

    (conversation,) = Conversation.objects.filter(owner=owner)
    users = Message.objects.filter(conversation=conversation, role="user").order_by("position")
    assert [m.content for m in users] == ["How many items in C-3?", "Which order was it?"]
    items = list(sync.conversations.items.list(made.id, order="asc"))
    assert [item.type for item in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
        "message",
    ]


def _post(v1, path, body):
    return v1.post(path, json.dumps(body), content_type="application/json")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"items": [PAST[0]] * 21}, "items"),
        ({"items": "hello"}, "items"),
        ({"items": [{"type": "message", "role": "system", "content": "Be brief."}]}, "items"),
        (
            {"items": [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}]},
            "items",
        ),
        ({"items": [{"type": "function_call_output", "call_id": "c1", "output": "x"}]}, "items"),
        (
            {"items": [{"type": "message", "role": "user", "content": [{"type": "input_audio"}]}]},
            "items[0].content[0]",
        ),
        (  # an image part with no image
            {"items": [{"type": "message", "role": "user", "content": [{"type": "input_image"}]}]},
            "items[0].content[0].image_url",
        ),
        ({"metadata": {"topic": 7}}, "metadata.topic"),
        ({"metadata": "orders"}, "metadata"),
    ],
)
def test_a_bad_conversation_is_an_openai_400_naming_the_field_and_stores_nothing(
    v1, user, body, param
):
    answer = _post(v1, "/v1/conversations", body)
    assert answer.status_code == 400, answer.json()
    error = answer.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert not Conversation.objects.filter(owner=user).exists()


@pytest.mark.django_db(transaction=True)
def test_another_users_or_an_unknown_conversation_is_a_404_everywhere(
    v1, other_v1, user, llm_server
):
    made = _post(v1, "/v1/conversations", {"items": PAST}).json()
    for path in (
        f"/v1/conversations/{made['id']}",
        f"/v1/conversations/{made['id']}/items",
        "/v1/conversations/conv_0f8fad5bd9cb469fa16570867728950e",
        "/v1/conversations/nonsense",
    ):
        answer = other_v1.get(path)
        assert answer.status_code == 404, path
        assert answer.json()["error"]["type"] == "not_found_error"
    added = _post(other_v1, f"/v1/conversations/{made['id']}/items", {"items": PAST})
    assert added.status_code == 404
    assert Message.objects.filter(conversation__owner=user).count() == 2
    item = v1.get(f"/v1/conversations/{made['id']}/items").json()["data"][0]
    gone = v1.delete(f"/v1/conversations/{made['id']}/items/{item['id']}")
    assert gone.status_code == 405  # not supported: one message removed could split a call
    assert gone.json()["error"]["type"] == "invalid_request_error"
    answer = _post(
        other_v1,
        "/v1/responses",
        {"model": MODEL, "input": "Hello", "conversation": made["id"]},
    )
    assert answer.status_code == 404
    assert answer.json()["error"]["param"] == "conversation"
    assert Conversation.objects.count() == 1


@pytest.mark.django_db
def test_conversation_and_previous_response_id_together_are_a_400(v1, user, llm_server):
    made = _post(v1, "/v1/conversations", {}).json()
    answer = _post(
        v1,
        "/v1/responses",
        {
            "model": MODEL,
            "input": "Hello",
            "conversation": made["id"],
            "previous_response_id": "resp_0f8fad5bd9cb469fa16570867728950e",
        },
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "conversation"
    assert not Message.objects.filter(conversation__owner=user).exists()


@pytest.mark.django_db(transaction=True)
def test_items_after_a_call_that_waits_for_its_result_are_refused(v1, user, llm_server):
    made = _post(v1, "/v1/conversations", {}).json()
    llm_server.push(tool_calls_reply([("lookup_order", '{"order": "A-1"}', "call_lookup")]))
    first = _post(
        v1,
        "/v1/responses",
        {"model": MODEL, "input": "Order A-1?", "tools": [LOOKUP], "conversation": made["id"]},
    )
    assert first.json()["output"][-1]["type"] == "function_call"
    count = Message.objects.filter(conversation__owner=user).count()
    answer = _post(v1, f"/v1/conversations/{made['id']}/items", {"items": PAST})
    assert answer.status_code == 400
    assert "call_lookup" in answer.json()["error"]["message"]
    assert Message.objects.filter(conversation__owner=user).count() == count
