"""The statements a /v1 request's turn start costs (chat/openai_api/turns.py `turn_start`).

Every request of a gateway's client makes one; each statement is a round trip
and the ORM's work on the request's thread (docs/performance.md, round fifteen).
"""

from __future__ import annotations

import pytest
from django.db import connection

from chat.models import Conversation, Message, Run
from chat.openai_api.answers import request_read
from chat.openai_api.threads import messages_read
from chat.openai_api.turns import turn_start
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

MODEL = "openai/test-model"


def started(user, messages, **fields):
    request = request_read({"model": MODEL, "messages": messages, **fields}, {})
    return turn_start(user, request, messages_read(request.messages), {})


def test_a_new_conversations_turn_starts_in_ten_statements(
    llm_server, django_assert_max_num_queries
):
    user = UserFactory()
    asked = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    # The conversation looked for, made, locked; the run, the message, its event (on SQLite
    # the event's number is a statement of its own); the request's transaction and the
    # lock's block, each a savepoint and its release here (in production the first is the
    # transaction itself). Before: 13 (a savepoint around the conversation's INSERT,
    # and the look for calls waiting for the client of a conversation that has no message).
    with django_assert_max_num_queries(10 if connection.vendor == "postgresql" else 11):
        turn = started(user, asked)
    conversation = Conversation.objects.get(owner=user)
    assert turn.conversation == conversation
    assert Run.objects.get(conversation=conversation) == turn.run
    stored = Message.objects.filter(conversation=conversation).values_list("role", "content")
    assert list(stored) == [("user", "2+2?")]
