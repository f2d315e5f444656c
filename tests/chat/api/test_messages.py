"""Messages over the REST API: the history in OpenAI format, and posting (202, wait, errors)."""

from __future__ import annotations

import time

import pytest
from rest_framework.throttling import ScopedRateThrottle

from chat.models import Message, Mode, Role, Run, RunStatus
from tests.assertions import assert_paired
from tests.chat.api.conftest import MESSAGES, as_openai, stored_turn
from tests.factories import ConversationFactory, RunFactory
from tests.llm_server import error_reply, text_reply, tool_calls_reply
from tests.stack import wait_for_run


def url(conversation) -> str:
    return f"/api/v1/conversations/{conversation.id}/messages/"


# --- history ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_history_is_openai_messages_with_our_fields(api, conversation, turn):
    response = api.get(url(conversation))

    assert response.status_code == 200
    messages = response.json()["results"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    user, call, answer, final = messages
    assert user["content"] == "What is 12*7?"
    assert user["run_id"] == str(turn.id)
    assert call["content"] is None
    assert call["tool_calls"][0]["function"] == {
        "name": "calculator",
        "arguments": '{"expression": "12*7"}',
    }
    assert call["latency_ms"] == 300
    assert call["usage"] == {"prompt_tokens": 40, "completion_tokens": 9, "cost_usd": None}
    assert answer["tool_call_id"] == call["tool_calls"][0]["id"]
    assert answer["name"] == "calculator"
    execution = turn.tool_executions.get()
    assert answer["tool_execution_id"] == str(execution.id)
    assert "tool_execution_id" not in user
    assert final["content"] == "12 times 7 is 84."
    assert final["finish_reason"] == "stop"
    for message in messages:
        assert {"id", "position", "created_at", "resource_id", "latency_ms", "usage"} <= set(
            message
        )
    openai_messages = [as_openai(m) for m in messages]
    MESSAGES.validate_python(openai_messages)
    assert_paired(openai_messages)
    # The user message says how its turn went; the others carry no turn.
    assert user["turn"] == {
        "run_id": str(turn.id),
        "status": "completed",
        "error": None,
        "latency_ms": turn.latency_ms,
        "model_calls": turn.model_calls,
    }
    assert all("turn" not in m for m in (call, answer, final))


def test_a_failed_turns_error_is_on_its_user_message(api, conversation):
    run = RunFactory(conversation=conversation, status=RunStatus.FAILED, error="The model said no.")
    run.trigger_message = Message.objects.create(
        conversation=conversation, run=run, position=0, role=Role.USER, content="hello"
    )
    run.save(update_fields=["trigger_message"])
    (user,) = api.get(url(conversation)).json()["results"]
    assert user["turn"]["status"] == "failed"
    assert user["turn"]["error"] == "The model said no."


@pytest.mark.django_db
def test_an_imported_tool_message_does_not_borrow_another_conversations_audit_row(
    api, conversation, other_user
):
    theirs = stored_turn(ConversationFactory(owner=other_user))
    call_id = theirs.tool_executions.get().tool_call_id
    Message.objects.create(
        conversation=conversation,
        position=0,
        role=Role.ASSISTANT,
        content=None,
        tool_calls=[
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "calculator", "arguments": "{}"},
            }
        ],
    )
    Message.objects.create(
        conversation=conversation,
        position=1,
        role=Role.TOOL,
        tool_call_id=call_id,
        name="calculator",
        content="4",
    )
    messages = api.get(url(conversation)).json()["results"]
    assert messages[1]["tool_execution_id"] is None


@pytest.mark.django_db
def test_the_history_pages_oldest_first(api, conversation):
    for _ in range(3):
        stored_turn(conversation)
    positions = []
    page = f"{url(conversation)}?page_size=5"
    while page:
        body = api.get(page).json()
        positions.extend(m["position"] for m in body["results"])
        page = body["next"]
    assert positions == list(range(12))


@pytest.mark.django_db
@pytest.mark.parametrize("turns", [1, 25])
def test_the_history_costs_three_queries_at_any_length(
    api, conversation, turns, django_assert_num_queries
):
    for _ in range(turns):
        stored_turn(conversation)
    # The token, the conversation, and the page with each tool message's audit row id.
    with django_assert_num_queries(3):
        response = api.get(url(conversation))
    assert len(response.json()["results"]) == 4 * turns


@pytest.mark.django_db
def test_someone_elses_history_is_a_404(api, foreign):
    conversation, _, _ = foreign
    response = api.get(url(conversation))
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


# --- posting: 202, and the errors -----------------------------------------------------------


@pytest.mark.django_db
def test_posting_stores_the_message_and_a_queued_run(api, conversation):
    response = api.post(url(conversation), {"content": "hello"}, format="json")

    assert response.status_code == 202
    body = response.json()
    run = Run.objects.get()
    message = Message.objects.get()
    assert body["run"]["id"] == str(run.id)
    assert body["run"]["status"] == "queued"
    assert body["run"]["trigger_message_id"] == str(message.id)
    assert body["run"]["model_call_log"] == []
    assert body["message"]["id"] == str(message.id)
    assert (body["message"]["role"], body["message"]["content"]) == ("user", "hello")
    assert (message.role, message.content, message.run_id) == (Role.USER, "hello", run.id)


@pytest.mark.django_db(transaction=True)  # the run starts at the post's commit
def test_a_post_that_does_not_wait_answers_202_with_its_question_even_if_its_run_ended(
    api, conversation, settings
):
    settings.TOOLCHAT_TASKS_EAGER = True  # the run ends inside the post, before its answer
    response = api.post(url(conversation), {"content": "What is 2+2?"}, format="json")

    assert response.status_code == 202
    body = response.json()
    assert body["run"]["status"] == "completed"  # the run as it stands
    assert (body["message"]["role"], body["message"]["content"]) == ("user", "What is 2+2?")
    regenerated = api.post(f"/api/v1/conversations/{conversation.id}/regenerate/", format="json")
    assert regenerated.status_code == 202
    assert regenerated.json()["message"]["role"] == "user"


@pytest.mark.django_db
def test_posting_while_a_run_is_active_is_a_409_naming_the_run(api, conversation):
    first = api.post(url(conversation), {"content": "one"}, format="json").json()
    response = api.post(url(conversation), {"content": "two"}, format="json")
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "conflict"
    assert body["details"] == {"run_id": first["run"]["id"], "status": "queued"}
    assert Message.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({}, "content"),
        ({"content": ""}, "content"),
        ({"content": "   \n"}, "content"),
        # Invisible: zero-width space and joiner, a byte-order mark, a soft hyphen, NUL.
        ({"content": "\u200b \u200d\ufeff\u00ad\x00"}, "content"),
        ({"content": None}, "content"),
        ({"content": 42}, "content"),
        ({"content": {"text": "hi"}}, "content"),
        ({"content": "hi", "role": "system"}, "role"),
    ],
)
def test_bad_content_is_a_400_naming_the_field_and_stores_nothing(
    api, conversation, payload, field
):
    response = api.post(url(conversation), payload, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["field"] == field
    assert not Message.objects.exists()
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_message_over_the_limit_is_refused(api, conversation, settings):
    settings.MAX_MESSAGE_CHARS = 10
    response = api.post(url(conversation), {"content": "x" * 11}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == "content"
    assert body["details"]["max_chars"] == 10
    assert body["details"]["chars"] == 11
    assert body["details"]["errors"] == {"content": [body["message"]]}
    assert not Message.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("wait=perhaps", "wait"),
        ("wait=true&timeout=601", "timeout"),
        ("wait=true&timeout=-1", "timeout"),
        ("wait=true&timeout=soon", "timeout"),
        ("wait=true&timeout=nan", "timeout"),
    ],
)
def test_bad_wait_parameters_are_a_400_before_anything_is_stored(api, conversation, query, field):
    response = api.post(f"{url(conversation)}?{query}", {"content": "hi"}, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_posting_to_someone_elses_conversation_is_a_404_and_stores_nothing(api, other_user):
    foreign = ConversationFactory(owner=other_user)
    response = api.post(url(foreign), {"content": "hi"}, format="json")
    assert response.status_code == 404
    assert not Message.objects.exists()


@pytest.mark.django_db
def test_posting_is_throttled_per_user(api, other_api, user, other_user, monkeypatch):
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"messages": "2/min"})
    mine = [ConversationFactory(owner=user) for _ in range(3)]
    statuses = [api.post(url(c), {"content": "hi"}, format="json").status_code for c in mine]
    assert statuses == [202, 202, 429]
    response = api.post(url(mine[2]), {"content": "hi"}, format="json")
    body = response.json()
    assert body["code"] == "throttled"
    assert 0 < body["details"]["retry_after"] <= 60
    assert response["Retry-After"] == str(body["details"]["retry_after"])
    # Another user has a budget of their own; reading is not throttled at all.
    theirs = ConversationFactory(owner=other_user)
    assert other_api.post(url(theirs), {"content": "hi"}, format="json").status_code == 202
    assert api.get(url(mine[0])).status_code == 200


# --- posting with ?wait=true -------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_wait_answers_with_the_final_message_and_the_history_is_valid_openai(api, user, llm_server):
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS, system_prompt="Be brief.")
    llm_server.push(
        tool_calls_reply(
            [
                ("calculator", '{"expression": "12*7"}', "call_a"),
                ("get_current_time", '{"timezone": "UTC"}', "call_b"),
            ]
        ),
        text_reply("12 times 7 is 84, and it is morning."),
    )

    response = api.post(
        f"{url(conversation)}?wait=true&timeout=30",
        {"content": "12*7, and the time?"},
        format="json",
    )

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["run"]["status"] == "completed"
    assert (body["run"]["steps"], body["run"]["model_calls"]) == (1, 2)
    assert body["run"]["latency_ms"] is not None
    assert [c["purpose"] for c in body["run"]["model_call_log"]] == ["tools", "compose"]
    assert {e["tool_call_id"] for e in body["run"]["tool_executions"]} == {"call_a", "call_b"}
    assert all(e["status"] == "succeeded" for e in body["run"]["tool_executions"])
    assert body["run"]["usage"] == {
        "prompt_tokens": 22,
        "completion_tokens": 14,
        "cached_tokens": None,
        "cost_usd": None,
    }
    assert body["message"]["role"] == "assistant"
    assert body["message"]["content"] == "12 times 7 is 84, and it is morning."
    assert body["message"]["latency_ms"] is not None

    history = api.get(url(conversation)).json()["results"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "tool", "assistant"]
    openai_messages = [as_openai(m) for m in history]
    MESSAGES.validate_python(openai_messages)
    assert_paired(openai_messages)
    executions = {e["tool_call_id"]: e["id"] for e in body["run"]["tool_executions"]}
    for message in history:
        if message["role"] == "tool":
            assert message["tool_execution_id"] == executions[message["tool_call_id"]]
    # What the model was sent is the same history, system prompt first.
    assert llm_server.requests[1]["messages"][1:5] == openai_messages[:4]


@pytest.mark.django_db(transaction=True)
def test_wait_reports_a_failed_run_with_no_message(api, conversation, llm_server, settings):
    settings.LLM_MAX_RETRIES = 0
    llm_server.push(error_reply(400, "bad request"))
    response = api.post(f"{url(conversation)}?wait=true", {"content": "hi"}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["run"]["status"] == "failed"
    assert body["run"]["error"]
    assert body["message"] is None


@pytest.mark.django_db(transaction=True)
def test_wait_past_its_timeout_answers_202_with_the_run_so_far(api, conversation, llm_server):
    llm_server.push(text_reply("slow answer", delay_s=1.5))
    response = api.post(
        f"{url(conversation)}?wait=true&timeout=0.2", {"content": "hi"}, format="json"
    )
    assert response.status_code == 202
    body = response.json()
    assert body["run"]["status"] in ("queued", "running")
    assert (body["message"]["role"], body["message"]["content"]) == ("user", "hi")
    run = wait_for_run(Run.objects.get(pk=body["run"]["id"]))
    assert run.status == RunStatus.COMPLETED


@pytest.mark.django_db
def test_an_active_run_from_before_blocks_posting(api, conversation):
    run = RunFactory(conversation=conversation, status=RunStatus.AWAITING_APPROVAL)
    response = api.post(url(conversation), {"content": "hi"}, format="json")
    assert response.status_code == 409
    assert response.json()["details"]["run_id"] == str(run.id)


@pytest.mark.parametrize("content", ["", "   ", "\u200b\n"])
def test_an_empty_message_is_a_400_with_its_field_and_details_errors(api, conversation, content):
    response = api.post(
        f"/api/v1/conversations/{conversation.id}/messages/", {"content": content}, format="json"
    )
    assert response.status_code == 400
    body = response.json()
    assert (body["code"], body["field"]) == ("invalid", "content")
    assert body["details"]["errors"]["content"], body
    assert not conversation.messages.exists()


@pytest.mark.django_db(transaction=True)
def test_wait_answers_200_as_soon_as_the_run_waits_for_a_person(api, conversation, llm_server):
    llm_server.push(
        tool_calls_reply([("delete_notes", '{"note_ids": ["a", "b"]}', "call_d")]),
        text_reply("Deleted."),
    )
    started = time.monotonic()
    response = api.post(
        f"{url(conversation)}?wait=true&timeout=20",
        {"content": "Delete notes a and b."},
        format="json",
    )
    assert time.monotonic() - started < 10  # not the timeout
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["run"]["status"] == "awaiting_approval"
    (pending,) = body["run"]["tool_executions"]
    assert (pending["name"], pending["status"]) == ("delete_notes", "awaiting_approval")
    # The message is the answer that asked for the call, so a script sees what waits.
    assert body["message"]["role"] == "assistant"
    assert body["message"]["tool_calls"][0]["id"] == pending["tool_call_id"] == "call_d"
    # The script can decide at once, and its next waited post waits for the end.
    decided = api.post(f"/api/v1/tool-executions/{pending['id']}/approve/", {}, format="json")
    assert decided.status_code == 200, decided.json()
    run = wait_for_run(Run.objects.get(pk=body["run"]["id"]))
    assert run.status == RunStatus.COMPLETED
