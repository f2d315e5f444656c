"""Fixtures for the REST API: token clients for two users, and stored turns to read back."""

from __future__ import annotations

import itertools
import json
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam
from pydantic import TypeAdapter
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from chat.models import (
    Conversation,
    Message,
    Role,
    Run,
    RunStatus,
)
from tests.factories import ConversationFactory, ModelCallFactory, RunFactory, ToolExecutionFactory

MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])
TOOLS = TypeAdapter(list[ChatCompletionFunctionToolParam])
_call_numbers = itertools.count(1)


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
    start = Message.objects.filter(conversation=conversation).count()
    now = timezone.now()
    run = RunFactory(
        conversation=conversation,
        status=status,
        steps=1,
        model_calls=2,
        started_at=now,
        finished_at=now + timedelta(seconds=1),
        latency_ms=1000,
    )
    call_id = f"call_{next(_call_numbers):06d}"
    user_message = Message.objects.create(
        conversation=conversation, run=run, position=start, role=Role.USER, content=question
    )
    run.trigger_message = user_message
    run.save(update_fields=["trigger_message"])
    calls = [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": "calculator", "arguments": '{"expression": "12*7"}'},
        }
    ]
    assistant = Message.objects.create(
        conversation=conversation,
        run=run,
        position=start + 1,
        role=Role.ASSISTANT,
        content=None,
        tool_calls=calls,
        latency_ms=300,
        model="test-model",
        prompt_tokens=40,
        completion_tokens=9,
        finish_reason="tool_calls",
    )
    result = {"success": True, "expression": "12*7", "result": 84}
    ToolExecutionFactory(
        run=run,
        message=assistant,
        tool_call_id=call_id,
        result=result,
        started_at=now,
        finished_at=now,
    )
    Message.objects.create(
        conversation=conversation,
        run=run,
        position=start + 2,
        role=Role.TOOL,
        tool_call_id=call_id,
        name="calculator",
        content=json.dumps(result),
    )
    final = Message.objects.create(
        conversation=conversation,
        run=run,
        position=start + 3,
        role=Role.ASSISTANT,
        content=answer,
        latency_ms=200,
        model="test-model",
        prompt_tokens=60,
        completion_tokens=8,
        finish_reason="stop",
    )
    for step, purpose, response, offered in (
        (1, "tools", assistant, ["calculator", "get_current_time"]),
        (2, "compose", final, []),
    ):
        ModelCallFactory(
            run=run,
            step=step,
            purpose=purpose,
            tools_offered=offered,
            response_message=response,
            started_at=now + timedelta(milliseconds=step),
        )
    return run


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
