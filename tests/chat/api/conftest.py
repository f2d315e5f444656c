"""Fixtures for the REST API: token clients for two users, and stored turns to read back."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam
from pydantic import TypeAdapter
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from chat.models import Conversation, Run, RunStatus
from tests.factories import CallSpec, ConversationFactory, RunFactory, finished_run

MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])
TOOLS = TypeAdapter(list[ChatCompletionFunctionToolParam])


@pytest.fixture(autouse=True)
def _fresh_throttle_counts():
    # Throttle counts live in the cache, which outlives a test's database rows.
    cache.clear()
    yield
    cache.clear()


def token_client(user) -> APIClient:
    """An API client that authenticates as `user` with a DRF token."""
    token, _ = Token.objects.get_or_create(user=user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def api(user) -> APIClient:
    return token_client(user)


@pytest.fixture
def other_api(other_user) -> APIClient:
    return token_client(other_user)


def stored_turn(
    conversation: Conversation,
    *,
    question: str = "What is 12*7?",
    answer: str = "12 times 7 is 84.",
    status: str = RunStatus.COMPLETED,
) -> Run:
    """A finished run as the engine stores it: a tool call, its answer, the reply, the audit."""
    return finished_run(
        conversation,
        question=question,
        calls=[CallSpec("calculator", {"expression": "12*7"})],
        answer=answer,
        status=status,
    )


@pytest.fixture
def turn(conversation) -> Run:
    return stored_turn(conversation)


@pytest.fixture
def foreign(other_user):
    """Another user's conversation with a finished run and a queued one."""
    conversation = ConversationFactory(owner=other_user)
    finished = stored_turn(conversation)
    active = RunFactory(conversation=conversation, status=RunStatus.QUEUED)
    return conversation, finished, active


OPENAI_KEYS = ("role", "content", "tool_calls", "tool_call_id")


def as_openai(message: dict) -> dict:
    """An API message with toolchat's own fields dropped: what an OpenAI request takes."""
    return {key: message[key] for key in OPENAI_KEYS if key in message}
