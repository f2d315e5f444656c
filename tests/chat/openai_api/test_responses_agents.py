"""The openai-agents SDK against /v1/responses, as its users run it, on a real uvicorn.

Its default agent: `Agent(name, instructions, tools=[function_tool])` on the
SDK's default model (the Responses API) with its default client pointed at
toolchat (`set_default_openai_client`), tracing off, `Runner.run`. The model is
the scripted server (tests/llm_server.py) or the embedded offline model. What
the user sees is `final_output`; what toolchat stored is one conversation with
the SDK's tool call answered, however the SDK continues it (its
`previous_response_id`, or a session of its own that resends the history).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import BaseModel
from rest_framework.authtoken.models import Token

from chat.models import Conversation, ExecutionStatus, Message, ToolExecution
from chat.selectors import history_for_model
from tests.assertions import assert_valid_history
from tests.clients.sdk import async_openai
from tests.factories import ResourceFactory, UserFactory
from tests.llm_server import text_reply, tool_calls_reply
from tools.models import Resource

agents = pytest.importorskip("agents")

pytestmark = pytest.mark.postgres

# The SDK reads the part of a model id before its first "/" as a provider of its own,
# and sends what follows "openai/" to its OpenAI client (docs/openai-api.md, model ids).
SCRIPTED_MODEL = "openai/openai/test-model"
OFFLINE_MODEL = "openai/offline/offline"
LOOKUPS: list[str] = []


@agents.function_tool
def lookup_order(order: str) -> str:
    """Look an order up in the client's own system.

    Args:
        order: The order's number, such as A-1.
    """
    LOOKUPS.append(order)
    return json.dumps({"order": order, "items": 3})


def _default_client(base_url: str):
    """A user, and the SDK's default client pointed at toolchat with the user's token."""
    owner = UserFactory()
    client = async_openai(
        base_url=f"{base_url}/v1",
        api_key=Token.objects.create(user=owner).key,
        max_retries=0,
    )
    agents.set_default_openai_client(client, use_for_tracing=False)
    agents.set_tracing_disabled(True)
    LOOKUPS.clear()
    return owner, client


@pytest.fixture
def scripted(scripted_server):
    yield _default_client(scripted_server)
    agents.set_default_openai_client(async_openai(api_key="unset"), use_for_tracing=False)


@pytest.fixture
def offline(asgi_server):
    yield _default_client(asgi_server)
    agents.set_default_openai_client(async_openai(api_key="unset"), use_for_tracing=False)


def _agent(model: str, **kwargs) -> agents.Agent:
    return agents.Agent(
        name="Orders",
        instructions="You answer questions about orders. Be brief.",
        model=model,
        **kwargs,
    )


def test_the_default_agent_runs_its_function_tool_and_continues_the_conversation(
    scripted, llm_server
):
    owner, _ = scripted
    agent = _agent(SCRIPTED_MODEL, tools=[lookup_order])
    llm_server.push(
        tool_calls_reply([("lookup_order", '{"order": "A-1"}', "call_lookup")]),
        text_reply("Order A-1 has 3 items."),
        text_reply("A-1 was the order you asked about."),
    )
    first = agents.Runner.run_sync(agent, "How many items are in order A-1?")
    assert first.final_output == "Order A-1 has 3 items."
    assert LOOKUPS == ["A-1"]  # the SDK ran its own tool, toolchat handed the call over

    second = agents.Runner.run_sync(
        agent, "Which order was that?", previous_response_id=first.last_response_id
    )
    assert second.final_output == "A-1 was the order you asked about."

    (conversation,) = Conversation.objects.filter(owner=owner)
    execution = ToolExecution.objects.get(run__conversation=conversation)
    assert (execution.name, execution.status) == ("lookup_order", ExecutionStatus.SUCCEEDED)
    # What the SDK's tool returned, as its function_call_output sent it.
    assert json.loads(execution.result["content"]) == {"order": "A-1", "items": 3}
    users = Message.objects.filter(conversation=conversation, role="user").order_by("position")
    assert [m.content for m in users] == [
        "How many items are in order A-1?",
        "Which order was that?",
    ]
    assert conversation.system_prompt == "You answer questions about orders. Be brief."
    assert_valid_history(history_for_model(conversation=conversation))
    # The scripted model was sent the SDK's tool and, on the second turn, the whole story.
    last = llm_server.requests[-1]
    assert "lookup_order" in json.dumps(last["messages"])


def test_a_session_of_the_sdks_own_resends_the_history_into_the_same_conversation(
    scripted, llm_server
):
    owner, _ = scripted
    agent = _agent(SCRIPTED_MODEL, tools=[lookup_order])
    session = agents.SQLiteSession("orders")  # in memory: the SDK keeps the history itself
    llm_server.push(
        tool_calls_reply([("lookup_order", '{"order": "B-2"}', "call_lookup")]),
        text_reply("Order B-2 has 3 items."),
        text_reply("That was order B-2."),
    )
    first = agents.Runner.run_sync(agent, "How many items are in order B-2?", session=session)
    assert first.final_output == "Order B-2 has 3 items."
    second = agents.Runner.run_sync(agent, "Which order was that?", session=session)
    assert second.final_output == "That was order B-2."

    (conversation,) = Conversation.objects.filter(owner=owner)
    contents = list(
        Message.objects.filter(conversation=conversation)
        .order_by("position")
        .values_list("role", "content")
    )
    assert [c for r, c in contents if r == "user"] == [
        "How many items are in order B-2?",
        "Which order was that?",
    ]
    assert [c for r, c in contents if r == "assistant" and c] == [
        "Order B-2 has 3 items.",
        "That was order B-2.",
    ]
    assert_valid_history(history_for_model(conversation=conversation))


class Calculation(BaseModel):
    answer: str
    value: int


def test_an_output_type_gets_a_validated_object_from_the_offline_model(offline):
    owner, _ = offline
    agent = _agent(OFFLINE_MODEL, output_type=Calculation)
    result = agents.Runner.run_sync(agent, "What is 6*7?")
    assert isinstance(result.final_output, Calculation)
    assert result.final_output.value == 42  # toolchat ran its calculator, then the model answered
    (conversation,) = Conversation.objects.filter(owner=owner)
    assert ToolExecution.objects.get(run__conversation=conversation).name == "calculator"


def _toolchat_tool(base_url: str, decide) -> agents.HostedMCPTool:
    """toolchat's own tools declared as the SDK's hosted MCP server, approvals handled by `decide`."""
    return agents.HostedMCPTool(
        tool_config={
            "type": "mcp",
            "server_label": "toolchat",
            "server_url": f"{base_url}/v1",
            "require_approval": "always",
        },
        on_approval_request=decide,
    )


def _two_notes(owner) -> str:
    return json.dumps({"note_ids": [str(ResourceFactory(owner=owner).pk) for _ in range(2)]})


def test_a_hosted_mcp_tool_of_toolchat_approves_its_call_and_the_run_answers(
    scripted, scripted_server, llm_server
):
    owner, client = scripted
    notes = _two_notes(owner)
    asked = []

    def approve(request):
        asked.append((request.data.server_label, request.data.name, request.data.arguments))
        return {"approve": True}

    agent = _agent(SCRIPTED_MODEL, tools=[_toolchat_tool(scripted_server, approve)])
    llm_server.push(
        tool_calls_reply([("delete_notes", notes, "call_delete")]),
        text_reply("Both notes are deleted."),
    )
    result = agents.Runner.run_sync(agent, "Delete my two old notes.")
    assert result.final_output == "Both notes are deleted."
    assert [(label, name, json.loads(args)) for label, name, args in asked] == [
        ("toolchat", "delete_notes", json.loads(notes))
    ]
    execution = ToolExecution.objects.get(tool_call_id="call_delete")
    assert execution.status == ExecutionStatus.SUCCEEDED
    assert execution.approved_by_id == owner.pk  # the user decided it, through the SDK
    assert not Resource.objects.filter(owner=owner).exists()
    # The SDK resent the history (no previous_response_id): the run's next part answered it.
    paused, answered = result.raw_responses
    assert answered.response_id == f"resp_{execution.run_id.hex}_1"
    assert [item.type for item in paused.output] == ["mcp_approval_request"]
    shown = asyncio.run(client.responses.retrieve(answered.response_id))
    assert shown.previous_response_id is None
    assert [(tool.type, tool.server_label) for tool in shown.tools] == [("mcp", "toolchat")]
    # The model answered once it was sent the call's result; it was not asked again.
    assert len(llm_server.requests) == 2
    assert llm_server.requests[1]["messages"][-1]["role"] == "tool"

    # The SDK's history of the run, resent with a new message, goes on in the same conversation.
    llm_server.push(text_reply("You have no notes left."))
    history = [*result.to_input_list(), {"role": "user", "content": "Any notes left?"}]
    second = agents.Runner.run_sync(agent, history)
    assert second.final_output == "You have no notes left."
    (conversation,) = Conversation.objects.filter(owner=owner)
    users = Message.objects.filter(conversation=conversation, role="user").order_by("position")
    assert [m.content for m in users] == ["Delete my two old notes.", "Any notes left?"]
    assert_valid_history(history_for_model(conversation=conversation))


async def _streamed(agent: agents.Agent, prompt: str) -> object:
    result = agents.Runner.run_streamed(agent, prompt)
    async for _event in result.stream_events():
        pass
    return result.final_output


@pytest.mark.parametrize("how", ["stateless", "previous_response_id", "conversation", "streamed"])
def test_a_hosted_mcp_tool_of_toolchat_rejects_its_call_with_a_reason(
    scripted, scripted_server, llm_server, how
):
    owner, client = scripted
    notes = _two_notes(owner)

    def reject(request):
        return {"approve": False, "reason": "Keep them."}

    agent = _agent(SCRIPTED_MODEL, tools=[_toolchat_tool(scripted_server, reject)])
    llm_server.push(
        tool_calls_reply([("delete_notes", notes, "call_delete")]),
        text_reply("I left your notes alone."),
    )
    prompt = "Delete my two old notes."
    if how == "streamed":
        final = asyncio.run(_streamed(agent, prompt))
    elif how == "conversation":  # the SDK sends only the answer, to the conversation
        held = asyncio.run(client.conversations.create()).id
        final = agents.Runner.run_sync(agent, prompt, conversation_id=held).final_output
    else:
        chained = how == "previous_response_id"  # the SDK sends only the answer, chained
        final = agents.Runner.run_sync(
            agent, prompt, auto_previous_response_id=chained
        ).final_output
    assert final == "I left your notes alone."
    execution = ToolExecution.objects.get(tool_call_id="call_delete")
    assert (execution.status, execution.decision_reason) == (ExecutionStatus.REJECTED, "Keep them.")
    assert execution.approved_by_id == owner.pk
    assert Resource.objects.filter(owner=owner).count() == 2
    assert "Keep them." in llm_server.requests[1]["messages"][-1]["content"]


def test_without_a_hook_the_sdk_interrupts_and_the_state_approved_runs_the_call(
    scripted, scripted_server, llm_server
):
    owner, _ = scripted
    agent = _agent(SCRIPTED_MODEL, tools=[_toolchat_tool(scripted_server, None)])
    llm_server.push(
        tool_calls_reply([("delete_notes", _two_notes(owner), "call_delete")]),
        text_reply("Both notes are deleted."),
    )
    paused = agents.Runner.run_sync(agent, "Delete my two old notes.")
    (interruption,) = paused.interruptions
    assert interruption.tool_name == "delete_notes"
    state = paused.to_state()
    state.approve(interruption)
    result = agents.Runner.run_sync(agent, state)
    assert result.final_output == "Both notes are deleted."
    execution = ToolExecution.objects.get(tool_call_id="call_delete")
    assert (execution.status, execution.approved_by_id) == (ExecutionStatus.SUCCEEDED, owner.pk)
    assert not Resource.objects.filter(owner=owner).exists()


def test_without_the_hosted_mcp_tool_the_sdk_refuses_the_approval_request_and_the_call_waits(
    scripted, llm_server
):
    """What docs/openai-api.md tells an SDK user who meets this error: declare toolchat's tool."""
    owner, _ = scripted
    llm_server.push(tool_calls_reply([("delete_notes", _two_notes(owner), "call_delete")]))
    with pytest.raises(agents.exceptions.ModelBehaviorError, match="label toolchat not found"):
        agents.Runner.run_sync(_agent(SCRIPTED_MODEL), "Delete my two old notes.")
    execution = ToolExecution.objects.get(tool_call_id="call_delete")
    assert execution.status == ExecutionStatus.AWAITING_APPROVAL  # in the Approvals panel
