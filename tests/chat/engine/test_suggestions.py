"""Follow-up suggestions: the tools' own, and the model's after the answer, on the final message."""

from __future__ import annotations

import json
import logging

import pytest

from chat.engine.suggestions import suggestions_clean, tool_suggestions
from chat.models import Message, Mode, ModelCall, Role, Run, RunEvent
from tests.assertions import wait_until
from tests.chat.api.conftest import token_client
from tests.factories import ConversationFactory
from tests.llm_server import text_reply, tool_calls_reply
from tests.stack import wait_for_run

pytestmark = pytest.mark.django_db(transaction=True)


def ask(user, conversation, content):
    response = token_client(user).post(
        f"/api/v1/conversations/{conversation.id}/messages/?wait=true&timeout=30",
        {"content": content},
        format="json",
    )
    assert response.status_code == 200, response.json()
    return response.json()


def test_a_tools_suggestions_are_stored_with_the_answer_and_listed(user, llm_server, settings):
    settings.LLM_SUGGESTIONS = "off"
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    llm_server.push(
        tool_calls_reply([("record_note", '{"title": "Boiler serviced"}', "call_n")]),
        text_reply("Noted."),
    )

    body = ask(user, conversation, "note that the boiler was serviced")

    assert body["message"]["suggestions"] == ['Search my notes for "Boiler"']
    listed = token_client(user).get(f"/api/v1/conversations/{conversation.id}/messages/").json()
    final = listed["results"][-1]
    assert final["suggestions"] == ['Search my notes for "Boiler"']
    # The tool call's own message carries none: only the final answer does.
    assert all(m.get("suggestions") is None for m in listed["results"][:-1])
    # ...and the live event of the answer carries them too.
    completed = [
        e.data["message"]
        for e in RunEvent.objects.filter(run_id=body["run"]["id"], type="message.completed")
    ]
    assert completed[-1]["suggestions"] == ['Search my notes for "Boiler"']
    assert len(llm_server.requests) == 2  # "off": no model call for suggestions


def test_the_model_adds_its_own_after_the_answer(user, llm_server, settings):
    settings.LLM_SUGGESTIONS = "on"
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    llm_server.push(
        tool_calls_reply([("record_note", '{"title": "Boiler serviced"}', "call_n")]),
        text_reply("Noted."),
        text_reply(
            json.dumps(
                {"suggestions": ["What time is it?", 'search my notes for "boiler"', "x" * 500]}
            )
        ),
    )

    body = ask(user, conversation, "note that the boiler was serviced")
    run_id = body["run"]["id"]

    assert body["run"]["model_calls"] == 3  # every call counts, the follow-ups call too
    # The follow-ups came before the run's end: its last event is still run.completed.
    event = RunEvent.objects.get(run_id=run_id, type="message.suggestions")
    last = RunEvent.objects.filter(run_id=run_id).order_by("-seq").first()
    assert last.type == "run.completed"
    assert event.seq < last.seq
    assert body["message"]["suggestions"] == ['Search my notes for "Boiler"', "What time is it?"]
    final = Message.objects.get(pk=body["message"]["id"])
    # The tool's first, then the model's; duplicates (any case) and overlong ones dropped.
    assert final.suggestions == ['Search my notes for "Boiler"', "What time is it?"]
    assert event.data == {"message_id": str(final.pk), "suggestions": final.suggestions}
    request = llm_server.requests[-1]
    assert request["response_format"]["json_schema"]["name"] == "follow_up_suggestions"
    assert "tools" not in request
    assert request["messages"][-2] == {"role": "assistant", "content": "Noted."}
    call = ModelCall.objects.get(run_id=run_id, purpose="suggest")
    assert call.status == "succeeded"


def test_a_run_taken_over_after_its_answer_sends_that_answer_once(user, llm_server, settings):
    # The worker stored the final answer, then died before the run's end: the
    # run taken over asks for the follow-ups with the history read back.
    import uuid
    from datetime import timedelta

    from django.utils import timezone

    from chat.engine.run import run_advance
    from chat.models import RunStatus

    settings.LLM_SUGGESTIONS = "on"
    settings.TOOLCHAT_RESTART_GRACE_S = 0
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    stale = timezone.now() - timedelta(minutes=5)
    run = Run.objects.create(
        conversation=conversation,
        mode=conversation.mode,
        status=RunStatus.RUNNING,
        lease=uuid.uuid4(),
        heartbeat_at=stale,
        started_at=stale,
    )
    question = Message.objects.create(
        conversation=conversation, run=run, position=0, role=Role.USER, content="hi"
    )
    Run.objects.filter(pk=run.pk).update(trigger_message=question)
    Message.objects.create(
        conversation=conversation, run=run, position=1, role=Role.ASSISTANT, content="Hello!"
    )
    llm_server.push(text_reply(json.dumps({"suggestions": ["What time is it?"]})))

    run_advance(run_id=run.pk)

    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED, run.error
    sent = llm_server.requests[-1]["messages"]
    assert [m for m in sent if m["role"] == "assistant"] == [
        {"role": "assistant", "content": "Hello!"}
    ], sent


def test_a_model_that_answers_garbage_leaves_the_turn_alone(user, llm_server, settings):
    settings.LLM_SUGGESTIONS = "on"
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    llm_server.push(text_reply("Hello!"), text_reply("not json at all"))

    body = ask(user, conversation, "hi")

    assert body["run"]["status"] == "completed"
    call = ModelCall.objects.get(run_id=body["run"]["id"], purpose="suggest")
    assert call.status == "failed"
    assert "JSONDecodeError" in call.error
    assert Message.objects.get(pk=body["message"]["id"]).suggestions is None
    assert not RunEvent.objects.filter(type="message.suggestions").exists()


def test_the_offline_model_suggests_by_default(user, settings):
    assert settings.LLM_SUGGESTIONS == "auto"
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)

    body = ask(user, conversation, "what is 2**10")

    assert 2 <= len(body["message"]["suggestions"]) <= 3  # there when the run has ended


def test_only_the_current_turns_tool_results_count():
    messages = [
        {"role": "user", "content": "first"},
        {"role": "tool", "tool_call_id": "a", "content": '{"suggestions": ["old one"]}'},
        {"role": "user", "content": "second"},
        {"role": "tool", "tool_call_id": "b", "content": '{"suggestions": ["new one", 7, ""]}'},
        {"role": "tool", "tool_call_id": "c", "content": "not json"},
        {"role": "tool", "tool_call_id": "d", "content": '["a list"]'},
    ]
    assert tool_suggestions(messages) == ["new one"]
    assert suggestions_clean(["a", "A", " a  b ", "c", "d", "e"]) == ["a", "a b", "c"]


def test_the_direct_mode_asks_the_model_nothing_more(user, llm_server, settings):
    settings.LLM_SUGGESTIONS = "on"
    conversation = ConversationFactory(owner=user, mode=Mode.DIRECT)
    llm_server.push(text_reply("Hello!"))

    body = ask(user, conversation, "hi")

    assert body["run"]["status"] == "completed"
    assert len(llm_server.requests) == 1
    assert not ModelCall.objects.filter(purpose="suggest").exists()


def test_a_cancel_during_the_follow_ups_call_leaves_none_and_ends_the_run(
    user, llm_server, settings, caplog
):
    caplog.set_level(logging.INFO, logger="chat.engine.run")
    settings.LLM_SUGGESTIONS = "on"
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    llm_server.push(
        text_reply("Hello!"),
        text_reply('{"suggestions": ["Too late"]}', delay_s=3),
    )
    client = token_client(user)
    posted = client.post(
        f"/api/v1/conversations/{conversation.id}/messages/", {"content": "hi"}, format="json"
    ).json()
    run_id = posted["run"]["id"]
    wait_until(
        lambda: len(llm_server.requests) >= 2,
        what="the answer to be in and the follow-ups to be asked",
    )

    assert client.post(f"/api/v1/runs/{run_id}/cancel/").status_code == 200

    run = wait_for_run(Run.objects.get(pk=run_id))
    # The worker that asked for the follow-ups has given up the run: nothing it
    # could still write is missed by what follows.
    wait_until(
        lambda: f"run {run_id}: lease lost" in caplog.text, what="the worker to let the run go"
    )
    run.refresh_from_db()
    assert run.status == "cancelled"
    events = list(RunEvent.objects.filter(run_id=run_id).order_by("seq"))
    assert events[-1].type == "run.cancelled"
    assert not [e for e in events if e.type == "message.suggestions"]
    answer = Message.objects.get(run_id=run_id, role=Role.ASSISTANT)
    assert (answer.content, answer.suggestions) == ("Hello!", None)
    # The call was made: the audit has it, stopped, as it has every model call.
    call = ModelCall.objects.get(run_id=run_id, purpose="suggest")
    assert (call.status, call.error) == ("failed", "Stopped: the run was cancelled or taken over.")
