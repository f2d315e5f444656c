"""Regenerate the last answer, edit and resend the last question: the old turn stays on record."""

from __future__ import annotations

import pytest

from chat.models import Message, Mode, Run, RunEvent, RunStatus
from tests.assertions import assert_paired
from tests.chat.api.conftest import MESSAGES, as_openai, token_client
from tests.factories import ConversationFactory, RunFactory
from tests.llm_server import text_reply, tool_calls_reply
from tests.stack import wait_for_run

pytestmark = pytest.mark.django_db(transaction=True)


def messages_url(conversation, **query) -> str:
    suffix = "&".join(f"{k}={v}" for k, v in query.items())
    return f"/api/v1/conversations/{conversation.id}/messages/" + (f"?{suffix}" if suffix else "")


def ask(api, conversation, content, **extra):
    response = api.post(
        messages_url(conversation, wait="true", timeout=30),
        {"content": content, **extra},
        format="json",
    )
    assert response.status_code == 200, response.json()
    return response.json()


def history(api, conversation, **query):
    return api.get(messages_url(conversation, **query)).json()["results"]


@pytest.fixture
def two_pass(user):
    return ConversationFactory(owner=user, mode=Mode.TWO_PASS)


def test_regenerate_answers_the_same_question_again_and_keeps_the_first_answer(
    api, two_pass, llm_server
):
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "12*7"}', "call_1")]),
        text_reply("It is 84."),
    )
    first = ask(api, two_pass, "What is 12*7?")
    question_id = history(api, two_pass)[0]["id"]
    llm_server.push(text_reply("12 times 7 makes 84."))

    response = api.post(f"/api/v1/conversations/{two_pass.id}/regenerate/")

    assert response.status_code == 202, response.json()
    body = response.json()
    assert body["message"]["id"] == question_id
    run = wait_for_run(Run.objects.get(pk=body["run"]["id"]))
    assert run.status == RunStatus.COMPLETED
    assert run.trigger_message_id is not None
    assert str(run.trigger_message_id) == question_id
    # The model saw the question alone: not the first answer, nor its tool call.
    sent = llm_server.requests[-1]["messages"]
    assert [m["role"] for m in sent if m["role"] != "system"] == ["user"]
    # The conversation now reads question → new answer; the question's turn is the new run.
    current = history(api, two_pass)
    assert [(m["role"], m["content"]) for m in current] == [
        ("user", "What is 12*7?"),
        ("assistant", "12 times 7 makes 84."),
    ]
    assert current[0]["turn"]["status"] == "completed"
    assert current[0]["turn"]["run_id"] == str(run.pk)
    # The question stays with the run it was posted with (that run's audit shows it).
    assert current[0]["run_id"] == first["run"]["id"]
    # ...and the first answer is still on record, marked superseded.
    everything = history(api, two_pass, include_superseded="true")
    assert [m["role"] for m in everything] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "assistant",
    ]
    old = [m for m in everything if m.get("superseded_at")]
    assert [(m["role"], m["content"]) for m in old[::2]] == [
        ("assistant", None),
        ("assistant", "It is 84."),
    ]
    assert old[1]["role"] == "tool"
    assert "84" in old[1]["content"]
    assert all(m["run_id"] == first["run"]["id"] for m in old)
    assert Run.objects.filter(conversation=two_pass).count() == 2
    # The export is one valid conversation: the current turn only.
    export = api.get(f"/api/v1/conversations/{two_pass.id}/export/").content.decode()
    assert "It is 84." not in export
    assert "12 times 7 makes 84." in export
    # A second tab learns which messages left the conversation.
    event = RunEvent.objects.get(run=run, type="messages.superseded")
    assert event.data == {
        "message_ids": [m["id"] for m in old],
        "after_message_id": question_id,
    }


def test_edit_replaces_the_last_question_and_its_answer(api, two_pass, llm_server):
    llm_server.push(text_reply("Four."))
    ask(api, two_pass, "What is 2+2?")
    old_question, old_answer = history(api, two_pass)
    llm_server.push(text_reply("Six."))

    body = ask(api, two_pass, "What is 3+3?", replaces=old_question["id"])

    assert body["message"]["content"] == "Six."
    current = history(api, two_pass)
    assert [(m["role"], m["content"]) for m in current] == [
        ("user", "What is 3+3?"),
        ("assistant", "Six."),
    ]
    sent = llm_server.requests[-1]["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["What is 3+3?"]
    everything = history(api, two_pass, include_superseded="true")
    assert {m["id"] for m in everything if m.get("superseded_at")} == {
        old_question["id"],
        old_answer["id"],
    }
    openai_messages = [as_openai(m) for m in current]
    MESSAGES.validate_python(openai_messages)
    assert_paired(openai_messages)


def test_only_the_last_question_can_be_edited(api, two_pass, llm_server, other_api, other_user):
    llm_server.push(text_reply("One."), text_reply("Two."))
    ask(api, two_pass, "first")
    ask(api, two_pass, "second")
    first = history(api, two_pass)[0]
    before = Message.objects.count()

    response = api.post(
        messages_url(two_pass), {"content": "changed", "replaces": first["id"]}, format="json"
    )

    assert response.status_code == 409
    assert response.json()["field"] == "replaces"
    assert Message.objects.count() == before
    assert not Message.objects.filter(superseded_at__isnull=False).exists()
    # Someone else's message id is no better.
    theirs = ConversationFactory(owner=other_user)
    llm_server.push(text_reply("Theirs."))
    ask(other_api, theirs, "mine")
    their_question = history(other_api, theirs)[0]
    response = api.post(
        messages_url(two_pass),
        {"content": "changed", "replaces": their_question["id"]},
        format="json",
    )
    assert response.status_code == 409
    response = api.post(
        messages_url(two_pass), {"content": "changed", "replaces": "nope"}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["field"] == "replaces"
    assert Message.objects.count() == before + 2


def test_regenerate_refuses_what_it_cannot_do(api, user, other_api):
    empty = ConversationFactory(owner=user)
    response = api.post(f"/api/v1/conversations/{empty.id}/regenerate/")
    assert response.status_code == 409
    assert "post a message first" in response.json()["message"]

    busy = ConversationFactory(owner=user)
    RunFactory(conversation=busy, status=RunStatus.RUNNING)
    response = api.post(f"/api/v1/conversations/{busy.id}/regenerate/")
    assert response.status_code == 409
    assert Run.objects.filter(conversation=busy).count() == 1

    assert other_api.post(f"/api/v1/conversations/{empty.id}/regenerate/").status_code == 404


def test_a_failed_turn_is_retried_without_a_second_copy_of_the_question(
    api, two_pass, llm_server, settings
):
    settings.LLM_MAX_RETRIES = 0
    from tests.llm_server import error_reply

    llm_server.push(error_reply(400, "bad request"))
    response = api.post(messages_url(two_pass, wait="true"), {"content": "hi"}, format="json")
    assert response.json()["run"]["status"] == "failed"
    llm_server.push(text_reply("Hello!"))

    response = api.post(f"/api/v1/conversations/{two_pass.id}/regenerate/")

    run = wait_for_run(Run.objects.get(pk=response.json()["run"]["id"]))
    assert run.status == RunStatus.COMPLETED
    current = history(api, two_pass)
    assert [(m["role"], m["content"]) for m in current] == [("user", "hi"), ("assistant", "Hello!")]
    assert current[0]["turn"]["status"] == "completed"


def test_the_audit_keeps_the_first_answer_marked_superseded(user, llm_server, client):
    from django.contrib.auth import get_user_model

    staff = get_user_model().objects.create_user("auditor", password="pw", is_staff=True)
    conversation = ConversationFactory(owner=user, mode=Mode.DIRECT)
    api = token_client(user)
    llm_server.push(text_reply("First answer."), text_reply("Second answer."))
    first = ask(api, conversation, "hello")
    response = api.post(f"/api/v1/conversations/{conversation.id}/regenerate/")
    wait_for_run(Run.objects.get(pk=response.json()["run"]["id"]))

    client.force_login(staff)
    page = client.get(f"/audit/runs/{first['run']['id']}/").content.decode()

    assert "First answer." in page
    assert "hello" in page  # its question stays with it
    assert ">superseded</span>" in page


@pytest.mark.parametrize(
    ("body", "content_type", "status", "code"),
    [
        (None, None, 202, None),
        ("{}", "application/json", 202, None),
        ("garbage", "text/plain", 415, "unsupported_media_type"),
        ("garbage", "application/json", 400, "parse_error"),
        ('{"content": "again"}', "application/json", 400, "invalid"),
        ("[]", "application/json", 400, "invalid"),
    ],
    ids=["empty", "empty-object", "text", "not-json", "a-field", "a-list"],
)
def test_regenerate_takes_an_empty_body_and_refuses_any_other(
    api, two_pass, body, content_type, status, code, settings
):
    settings.LLM_PROVIDER = "offline"
    ask(api, two_pass, "What is 12*7?")
    runs = Run.objects.count()
    url = f"/api/v1/conversations/{two_pass.id}/regenerate/"
    if body is None:
        response = api.post(url)
    else:
        response = api.generic("POST", url, body, content_type=content_type)
    assert response.status_code == status, response.json()
    if code is None:
        wait_for_run(Run.objects.get(pk=response.json()["run"]["id"]))
        assert Run.objects.count() == runs + 1
    else:
        assert response.json()["code"] == code
        assert Run.objects.count() == runs
