"""/v1/responses in-process: the resource, client tools, continuation, retrieval, errors, storage."""

from __future__ import annotations

import pytest

from chat.models import Conversation, ExecutionStatus, Message, Run, ToolExecution
from tests.llm_server import text_reply, tool_calls_reply

MODEL = "openai/test-model"
URL = "/v1/responses"
# toolchat's own tools declared as an MCP server, as the agents SDK's HostedMCPTool sends them.
TOOLCHAT = {"type": "mcp", "server_label": "toolchat", "server_url": "https://toolchat.test/v1"}
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


def create(client, **fields):
    return client.post(URL, {"model": MODEL, **fields}, format="json")


def error_of(response):
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


@pytest.mark.django_db(transaction=True)
def test_a_response_shows_server_side_calls_the_answer_and_usage(v1, user, llm_server):
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "12*7"}', "call_a")]),
        text_reply("12 times 7 is 84."),
    )
    response = create(
        v1,
        input="12*7?",
        instructions="Be brief.",
        temperature=0.2,
        max_output_tokens=300,
        metadata={"ticket": "T-1"},
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    run = Run.objects.get(pk=response["X-Toolchat-Run-Id"])
    assert body["id"] == f"resp_{run.pk.hex}"
    assert (body["object"], body["status"], body["model"]) == ("response", "completed", MODEL)
    assert body["completed_at"] >= body["created_at"]
    call, message = body["output"]
    assert call["type"] == "mcp_call"
    assert (call["server_label"], call["name"], call["status"]) == (
        "toolchat",
        "calculator",
        "completed",
    )
    assert "84" in call["output"]
    assert message["type"] == "message"
    assert message["content"][0]["type"] == "output_text"
    assert message["content"][0]["text"] == "12 times 7 is 84."
    assert (
        body["usage"]["total_tokens"]
        == body["usage"]["input_tokens"] + body["usage"]["output_tokens"]
    )
    assert body["usage"]["input_tokens"] > 0
    assert (body["instructions"], body["temperature"], body["max_output_tokens"]) == (
        "Be brief.",
        0.2,
        300,
    )
    assert body["metadata"] == {"ticket": "T-1"}
    assert body["store"] is True
    first = llm_server.requests[0]
    assert first["messages"][0] == {"role": "system", "content": "Be brief."}
    assert v1.get(f"{URL}/{body['id']}").json() == body


@pytest.mark.django_db(transaction=True)
def test_a_client_tool_round_trip_with_previous_response_id(v1, user, llm_server):
    llm_server.push(
        tool_calls_reply([("lookup_order", '{"order": "A-1"}', "call_lookup")]),
        text_reply("Order A-1 has 3 items."),
    )
    first = create(v1, input="How many items are in order A-1?", tools=[LOOKUP]).json()
    (call,) = first["output"]
    assert call["type"] == "function_call"
    assert (call["call_id"], call["name"]) == ("call_lookup", "lookup_order")
    assert call["arguments"] == '{"order": "A-1"}'
    execution = ToolExecution.objects.get(tool_call_id="call_lookup")
    assert execution.status == ExecutionStatus.CLIENT
    output = {"type": "function_call_output", "call_id": "call_lookup", "output": '{"items": 3}'}
    second = create(v1, input=[output], previous_response_id=first["id"], tools=[LOOKUP])
    assert second.status_code == 200, second.json()
    body = second.json()
    assert body["previous_response_id"] == first["id"]
    assert body["output"][-1]["content"][0]["text"] == "Order A-1 has 3 items."
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.SUCCEEDED
    (conversation,) = Conversation.objects.filter(owner=user)
    assert [m.role for m in Message.objects.filter(conversation=conversation)] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    # The model was sent the client's result after its call.
    assert llm_server.requests[1]["messages"][-1]["content"] == '{"items": 3}'


@pytest.mark.django_db(transaction=True)
def test_a_stateless_follow_up_with_the_output_items_continues_the_conversation(
    v1, user, llm_server
):
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "6*7"}', "call_c")]),
        text_reply("42."),
        text_reply("Twice that is 84."),
    )
    question = {"type": "message", "role": "user", "content": "6*7?"}
    first = create(v1, input=[question]).json()
    again = [
        {**question, "content": [{"type": "input_text", "text": "6*7?"}]},
        *first["output"],  # the mcp_call item and the answer, as a stateless client resends them
        {"role": "user", "content": "And twice that?"},
    ]
    response = create(v1, input=again)
    assert response.status_code == 200, response.json()
    assert Conversation.objects.filter(owner=user).count() == 1


@pytest.mark.django_db(transaction=True)
def test_another_users_response_is_a_404_and_a_deleted_one_is_gone(v1, other_v1, user, llm_server):
    llm_server.push(text_reply("Paris."))
    body = create(v1, input="Capital of France?").json()
    path = f"{URL}/{body['id']}"
    for response in (other_v1.get(path), other_v1.delete(path), v1.get(f"{URL}/resp_nonesuch")):
        assert response.status_code == 404
        assert error_of(response)["type"] == "not_found_error"
    stolen = create(other_v1, input="Go on.", previous_response_id=body["id"])
    assert stolen.status_code == 404
    assert error_of(stolen)["param"] == "previous_response_id"
    deleted = v1.delete(path)
    assert deleted.json() == {"id": body["id"], "object": "response.deleted", "deleted": True}
    assert v1.get(path).status_code == 404
    # The turn itself stays in the conversation and its audit.
    assert Message.objects.filter(conversation__owner=user).count() == 2


@pytest.mark.django_db(transaction=True)
def test_store_false_answers_but_keeps_no_response_to_retrieve(v1, llm_server):
    llm_server.push(text_reply("Paris."))
    body = create(v1, input="Capital of France?", store=False).json()
    assert (body["status"], body["store"]) == ("completed", False)
    assert v1.get(f"{URL}/{body['id']}").status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"input": []}, "input"),
        ({"input": [{"type": "message", "role": "robot", "content": "hi"}]}, "input[0].role"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0]",
        ),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        (
            {
                "input": "hi",
                "tools": [{"type": "mcp", "server_label": "github", "server_url": "x"}],
            },
            "tools[0].server_label",
        ),
        (
            {"input": "hi", "tools": [{**TOOLCHAT, "allowed_tools": ["calculator"]}]},
            "tools[0].allowed_tools",
        ),
        (
            {"input": "hi", "tools": [{**TOOLCHAT, "require_approval": 1}]},
            "tools[0].require_approval",
        ),
        ({"input": "hi", "tools": [{"type": "function", "name": "no spaces"}]}, "tools[0].name"),
        ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "hi", "top_p": 2}, "top_p"),
        ({"input": "hi", "store": "yes"}, "store"),
        ({"input": "hi", "background": "yes"}, "background"),
        ({"input": "hi", "background": True, "store": False}, "store"),
        ({"input": "hi", "background": True, "stream": True}, "stream"),
        ({"input": [{"type": "function_call_output", "output": "3"}]}, "input[0].call_id"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_stores_nothing(v1, llm_server, fields, param):
    response = create(v1, **fields)
    assert response.status_code == 400, response.json()
    error = error_of(response)
    assert (error["type"], error["param"]) == ("invalid_request_error", param), error
    assert not Conversation.objects.exists()
    assert not Run.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_toolchat_declared_as_an_mcp_tool_is_echoed_and_not_sent_as_a_function(v1, llm_server):
    llm_server.push(text_reply("Hello."))
    function = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    declared = {**TOOLCHAT, "require_approval": "always", "headers": {"Authorization": "s3cret"}}
    body = create(v1, input="Hi", tools=[declared, function]).json()
    assert body["status"] == "completed", body
    assert body["tools"][0] == {**TOOLCHAT, "require_approval": "always"}
    assert body["tools"][1]["name"] == "lookup"
    # The model is offered the client's function and toolchat's own tools, each once.
    offered = [tool["function"]["name"] for tool in llm_server.requests[0]["tools"]]
    assert "lookup" in offered
    assert len(offered) == len(set(offered))
    # Its headers are neither echoed nor kept.
    stored = list(Run.objects.values_list("response", flat=True))
    assert "s3cret" not in str([body, stored])
