"""The statements a /v1 request's turn start and its answer cost (`turn_start`, `run_outcome`).

Every request of a gateway's client makes one; each statement is a round trip
and the ORM's work on the request's thread (docs/gateway.md, round fifteen).
"""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from chat.models import Conversation, Message, Run
from chat.openai_api.answers import request_read, run_outcome
from chat.openai_api.threads import messages_read
from chat.openai_api.turns import turn_start
from tests.factories import RunFactory, UserFactory
from tests.llm_server import text_reply, tool_calls_reply

pytestmark = pytest.mark.django_db

MODEL = "openai/test-model"


def started(user, messages, **fields):
    request = request_read({"model": MODEL, "messages": messages, **fields}, {})
    return turn_start(user, request, messages_read(request.messages), {})


def test_a_new_conversations_turn_starts_in_eight_statements(
    llm_server, django_assert_max_num_queries
):
    user = UserFactory()
    asked = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    # The conversation looked for, made, locked; the run, the message, its event (on SQLite
    # the event's number is a statement of its own); the request's transaction, a
    # savepoint and its release here (in production the transaction itself). Before: 13
    # (a savepoint around the conversation's INSERT, and the look for calls waiting for the
    # client of a conversation that has no message), then 10 (the lock's block took a
    # savepoint of its own, though no other post can see a conversation not yet committed).
    with django_assert_max_num_queries(8 if connection.vendor == "postgresql" else 9):
        turn = started(user, asked)
    conversation = Conversation.objects.get(owner=user)
    assert turn.conversation == conversation
    assert Run.objects.get(conversation=conversation) == turn.run
    stored = Message.objects.filter(conversation=conversation).values_list("role", "content")
    assert list(stored) == [("user", "2+2?")]


@pytest.mark.django_db(transaction=True)
def test_an_answer_is_read_in_one_statement_with_the_turns_usage(
    v1, llm_server, django_assert_max_num_queries
):
    llm_server.push(
        tool_calls_reply(
            [("calculator", '{"expression": "2+2"}', "call_a")],
            prompt_tokens=30,
            completion_tokens=5,
        ),
        text_reply("It is 4.", prompt_tokens=50, completion_tokens=7),
    )
    answer = v1.post(
        "/v1/chat/completions",
        {"model": MODEL, "messages": [{"role": "user", "content": "2+2?"}]},
        format="json",
    )
    assert answer.status_code == 200, answer.json()
    run_id = answer["X-Toolchat-Run-Id"]
    # The run with its model calls' tokens summed and its answer. Before: three (the run, the
    # sum, the answer), then two (the answer apart).
    with django_assert_max_num_queries(1):
        outcome = run_outcome(run_id)
    assert outcome.content == "It is 4."
    assert outcome.finish_reason == "stop"
    assert outcome.usage == {"prompt_tokens": 80, "completion_tokens": 12, "total_tokens": 92}
    assert answer.json()["usage"] == outcome.usage
    with pytest.raises(Run.DoesNotExist):
        run_outcome(uuid.uuid4())


def test_a_run_with_no_answer_yet_is_read_in_one_statement(django_assert_max_num_queries):
    run = RunFactory()  # queued: no assistant message
    with django_assert_max_num_queries(1):
        outcome = run_outcome(run.pk)
    assert outcome.status == 504
    assert outcome.error is not None
    assert outcome.error["code"] == "timeout"
    assert outcome.usage == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
