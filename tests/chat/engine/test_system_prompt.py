"""The system prompt a model is told: the default, a conversation's own, none; kept by the run.

Turns run against the scripted model server; the assertions are on what it
received, on the run's record of the prompt, and on the stored history (which
never holds the prompt: it stays the user's conversation).
"""

from __future__ import annotations

import json

import pytest

from chat.export import conversation_export
from chat.models import Message, Mode, Role, Run, RunStatus
from chat.services.conversations import conversation_update
from chat.services.runs import run_regenerate, run_start
from tests.assertions import wait_until
from tests.chat.engine.conftest import wait_for_run
from tests.factories import ConversationFactory
from tests.llm_server import text_reply, tool_calls_reply

pytestmark = pytest.mark.django_db(transaction=True)

DEFAULT = "You are a helpful assistant. Use the tools offered when they help, and answer the user in plain words."


def first_messages(server):
    return [request["messages"][0] for request in server.requests]


def test_every_call_of_a_turn_begins_with_the_default_prompt(llm_server, user, settings):
    settings.LLM_SUGGESTIONS = "on"
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "12*7"}')]),
        text_reply("Twelve times seven is 84."),
        text_reply(json.dumps({"suggestions": ["And 12*8?"]})),
    )
    run = wait_for_run(run_start(conversation=conversation, content="what is 12*7"))

    assert run.status == RunStatus.COMPLETED, run.error
    assert settings.TOOLCHAT_SYSTEM_PROMPT == DEFAULT
    # Choosing tools, composing, suggesting: the prompt comes first, and only once.
    assert len(llm_server.requests) == 3
    assert first_messages(llm_server) == [{"role": "system", "content": DEFAULT}] * 3
    for request in llm_server.requests:
        assert [m["content"] for m in request["messages"]].count(DEFAULT) == 1
        assert request["messages"][1] == {"role": "user", "content": "what is 12*7"}
    assert run.system_prompt == DEFAULT
    # The history is the user's conversation: the prompt is not one of its messages.
    assert not Message.objects.filter(conversation=conversation, role=Role.SYSTEM).exists()


@pytest.mark.parametrize("mode", [Mode.DIRECT, Mode.LOOP, Mode.LLM])
def test_every_mode_sends_the_prompt(llm_server, user, mode):
    conversation = ConversationFactory(owner=user, mode=mode, system_prompt="Be brief.")
    decision = {"done": True, "next_tool": None, "arguments": {}, "final_output": "Hello."}
    if mode == Mode.DIRECT:
        llm_server.push(tool_calls_reply([("calculator", '{"expression": "1+1"}')]))
    elif mode == Mode.LLM:
        llm_server.push(text_reply(json.dumps(decision)))
    else:
        llm_server.push(
            tool_calls_reply([("calculator", '{"expression": "1+1"}')]), text_reply("Two.")
        )
    run = wait_for_run(run_start(conversation=conversation, content="what is 1+1"))

    assert run.status == RunStatus.COMPLETED, run.error
    assert llm_server.requests
    assert first_messages(llm_server) == [{"role": "system", "content": "Be brief."}] * len(
        llm_server.requests
    )


def test_a_conversations_own_prompt_wins_over_the_default(llm_server, user):
    conversation = ConversationFactory(owner=user, system_prompt="Answer in French.")
    llm_server.push(text_reply("Bonjour."))
    run = wait_for_run(run_start(conversation=conversation, content="hello"))

    assert run.status == RunStatus.COMPLETED, run.error
    (request,) = llm_server.requests
    assert request["messages"][:2] == [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "hello"},
    ]
    assert run.system_prompt == "Answer in French."


def test_a_blank_conversation_prompt_means_the_default(llm_server, user):
    conversation = ConversationFactory(owner=user, system_prompt="  \n ")
    llm_server.push(text_reply("Hi."))
    run = wait_for_run(run_start(conversation=conversation, content="hello"))
    assert first_messages(llm_server) == [{"role": "system", "content": DEFAULT}]
    assert run.system_prompt == DEFAULT


def test_with_the_setting_off_no_system_message_is_sent(llm_server, user, settings):
    settings.TOOLCHAT_SYSTEM_PROMPT = ""
    conversation = ConversationFactory(owner=user)
    llm_server.push(tool_calls_reply([("calculator", '{"expression": "2+2"}')]), text_reply("4."))
    run = wait_for_run(run_start(conversation=conversation, content="what is 2+2"))

    assert run.status == RunStatus.COMPLETED, run.error
    assert first_messages(llm_server) == [{"role": "user", "content": "what is 2+2"}] * 2
    # The compose instruction is the only system message, last.
    assert [m["role"] for m in llm_server.requests[1]["messages"]].count("system") == 1
    assert run.system_prompt == ""


def test_a_run_keeps_the_prompt_it_started_with(llm_server, user):
    conversation = ConversationFactory(owner=user, system_prompt="Be brief.")
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "3*3"}')], delay_s=0.5),
        text_reply("Nine."),
        text_reply("Still nine."),
    )
    run = run_start(conversation=conversation, content="what is 3*3")
    wait_until(lambda: len(llm_server.requests) == 1, what="the first model call")
    # Changed while the run is between its calls: it applies from the next run on.
    conversation_update(conversation=conversation, system_prompt="Be verbose.")
    run = wait_for_run(run)

    assert run.status == RunStatus.COMPLETED, run.error
    assert first_messages(llm_server) == [{"role": "system", "content": "Be brief."}] * 2
    assert run.system_prompt == "Be brief."

    again = wait_for_run(run_regenerate(conversation=conversation))
    assert again.status == RunStatus.COMPLETED, again.error
    assert llm_server.requests[-1]["messages"][0] == {"role": "system", "content": "Be verbose."}
    assert (again.system_prompt, Run.objects.get(pk=run.pk).system_prompt) == (
        "Be verbose.",
        "Be brief.",
    )


def test_the_export_begins_with_the_prompt_each_run_sent(llm_server, user):
    conversation = ConversationFactory(owner=user, system_prompt="Be brief.")
    llm_server.push(text_reply("One."), text_reply("Two."))
    wait_for_run(run_start(conversation=conversation, content="first"))
    conversation_update(conversation=conversation, system_prompt="")
    wait_for_run(run_start(conversation=conversation, content="second"))

    first, second = conversation_export(conversation=conversation, per_run=True)
    assert first["messages"][0] == {"role": "system", "content": "Be brief."}
    assert second["messages"][0] == {"role": "system", "content": DEFAULT}
    (whole,) = conversation_export(conversation=conversation)
    assert [m["role"] for m in whole["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert whole["messages"][0]["content"] == DEFAULT
