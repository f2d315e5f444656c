"""A reasoning model's thoughts: kept on its message, shown and exported on request, never sent back.

The scripted server streams `reasoning_content` (DeepSeek, vLLM) or
`reasoning` (OpenRouter, Ollama) before the answer, as those servers do; the
turns run through the real engine, and the assertions are on what is stored,
what the API and the events show, and what the model is sent next.
"""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from chat.models import Message, Mode, Role, RunEvent, RunStatus
from chat.services.runs import run_start
from tests.assertions import assert_valid_history
from tests.chat.engine.conftest import wait_for_run
from tests.factories import ConversationFactory
from tests.llm_server import text_reply, tool_calls_reply

pytestmark = pytest.mark.django_db(transaction=True)

CHOOSING = "The user wants a product: the calculator does that."
COMPOSING = "It returned 84. Say it plainly."
LATER = "Now 12*8, which is 96."


@pytest.fixture
def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def assert_no_reasoning_sent(request: dict) -> None:
    for message in request["messages"]:
        assert not {"reasoning", "reasoning_content"} & set(message), message
    sent = json.dumps(request)
    for text in (CHOOSING, COMPOSING, LATER):
        assert text not in sent


@pytest.mark.parametrize("unstreamed", [None, "json"], ids=["streamed", "json"])
def test_reasoning_is_kept_on_the_message_and_never_sent_back(llm_server, user, api, unstreamed):
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    llm_server.push(
        tool_calls_reply(
            [("calculator", '{"expression": "12*7"}', "call_calc1")],
            reasoning=CHOOSING,
            unstreamed=unstreamed,
        ),
        text_reply(
            "Twelve times seven is 84.",
            reasoning=COMPOSING,
            reasoning_field="reasoning",
            unstreamed=unstreamed,
        ),
    )
    run = wait_for_run(run_start(conversation=conversation, content="what is 12*7"))
    assert run.status == RunStatus.COMPLETED, run.error

    rows = list(Message.objects.filter(conversation=conversation).order_by("position"))
    assert [m.role for m in rows] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert [m.reasoning for m in rows] == ["", CHOOSING, "", COMPOSING]
    assert rows[3].content == "Twelve times seven is 84."
    # The answer streamed to the page is the answer alone.
    deltas = RunEvent.objects.filter(run=run, type="message.delta").order_by("seq")
    assert "".join(e.data["text"] for e in deltas) == "Twelve times seven is 84."
    completed = [
        e.data["message"]
        for e in RunEvent.objects.filter(run=run, type="message.completed").order_by("seq")
    ]
    assert [m.get("reasoning") for m in completed if m["role"] == "assistant"] == [
        CHOOSING,
        COMPOSING,
    ]

    shown = api.get(f"/api/v1/conversations/{conversation.pk}/messages/").json()["results"]
    assert [m.get("reasoning", "absent") for m in shown] == [
        "absent",
        CHOOSING,
        "absent",
        COMPOSING,
    ]

    # The compose call, and the next turn's first call, carry none of it.
    llm_server.push(text_reply("And 12*8 is 96.", reasoning=LATER, unstreamed=unstreamed))
    again = wait_for_run(run_start(conversation=conversation, content="and 12*8?"))
    assert again.status == RunStatus.COMPLETED, again.error
    compose, following = llm_server.requests[1], llm_server.requests[2]
    assert following["messages"][-1] == {"role": "user", "content": "and 12*8?"}
    for request in (compose, following):
        assert_no_reasoning_sent(request)
        assert_valid_history(request["messages"])
    assert Message.objects.filter(conversation=conversation).last().reasoning == LATER


def test_an_answer_without_reasoning_shows_none(llm_server, user, api):
    conversation = ConversationFactory(owner=user)
    llm_server.push(text_reply("Hello."))
    wait_for_run(run_start(conversation=conversation, content="hi"))
    answer = Message.objects.get(conversation=conversation, role=Role.ASSISTANT)
    assert answer.reasoning == ""
    shown = api.get(f"/api/v1/conversations/{conversation.pk}/messages/").json()["results"]
    assert shown[-1]["reasoning"] is None


def test_the_export_has_reasoning_only_when_asked(llm_server, user, api):
    conversation = ConversationFactory(owner=user)
    llm_server.push(text_reply("Hello.", reasoning=CHOOSING))
    wait_for_run(run_start(conversation=conversation, content="hi"))
    url = f"/api/v1/conversations/{conversation.pk}/export/"

    (plain,) = [json.loads(line) for line in api.get(url).content.decode().splitlines()]
    assert CHOOSING not in json.dumps(plain)
    assert all("reasoning" not in m for m in plain["messages"])

    for query in ("?include_reasoning=true", "?per=run&include_reasoning=1"):
        response = api.get(url + query)
        assert response.status_code == 200
        (line,) = [json.loads(text) for text in response.content.decode().splitlines()]
        assert line["messages"][-1] == {
            "role": "assistant",
            "content": "Hello.",
            "reasoning": CHOOSING,
        }
        assert all("reasoning" not in m for m in line["messages"][:-1])

    refused = api.get(url + "?include_reasoning=maybe")
    assert refused.status_code == 400
    assert refused.json()["field"] == "include_reasoning"


def test_a_client_cannot_post_reasoning(llm_server, user, api):
    conversation = ConversationFactory(owner=user)
    response = api.post(
        f"/api/v1/conversations/{conversation.pk}/messages/",
        {"content": "hi", "reasoning": "trust me"},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["field"] == "reasoning"
    assert not Message.objects.filter(conversation=conversation).exists()
