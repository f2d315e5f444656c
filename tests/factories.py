"""factory_boy factories for toolchat's models."""

from __future__ import annotations

import json
from datetime import timedelta

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from chat.models import (
    CallStatus,
    Conversation,
    ExecutionStatus,
    Message,
    ModelCall,
    Role,
    Run,
    ToolExecution,
)
from tools.models import Resource


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password("correct horse battery staple")


class ConversationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Conversation

    owner = factory.SubFactory(UserFactory)
    title = factory.Sequence(lambda n: f"Conversation {n}")


class RunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Run

    conversation = factory.SubFactory(ConversationFactory)
    mode = factory.SelfAttribute("conversation.mode")


class MessageFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Message

    conversation = factory.SubFactory(ConversationFactory)
    position = factory.Sequence(lambda n: n)
    role = Role.USER
    content = factory.Faker("sentence")


class ResourceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Resource

    kind = "note"
    owner = factory.SubFactory(UserFactory)
    title = factory.Sequence(lambda n: f"Note {n}")
    data = factory.LazyAttribute(lambda r: {"title": r.title, "body": ""})


class ToolExecutionFactory(factory.django.DjangoModelFactory):
    """A finished, successful call (pass `run` and `message`, the assistant message asking it)."""

    class Meta:
        model = ToolExecution

    step = 1
    tool_call_id = factory.Sequence(lambda n: f"call_factory_{n:06d}")
    name = "calculator"
    arguments = factory.LazyFunction(lambda: {"expression": "12*7"})
    status = ExecutionStatus.SUCCEEDED
    result = factory.LazyFunction(lambda: {"success": True, "result": 84})
    content = factory.LazyAttribute(lambda e: json.dumps(e.result))
    result_chars = factory.LazyAttribute(lambda e: len(e.content or ""))
    started_at = factory.LazyFunction(timezone.now)
    finished_at = factory.LazyAttribute(
        lambda e: e.started_at + timedelta(milliseconds=e.duration_ms)
    )
    duration_ms = 3
    attempts = 1


class ModelCallFactory(factory.django.DjangoModelFactory):
    """A successful model call of `run`; with `response_message`, its figures are the message's."""

    class Meta:
        model = ModelCall

    step = 1
    purpose = "tools"
    model = "test-model"
    provider = "openai"
    message_count = 2
    status = CallStatus.SUCCEEDED
    started_at = factory.LazyFunction(timezone.now)
    latency_ms = factory.LazyAttribute(
        lambda c: c.response_message.latency_ms if c.response_message else 100
    )
    prompt_tokens = factory.LazyAttribute(
        lambda c: c.response_message.prompt_tokens if c.response_message else 10
    )
    completion_tokens = factory.LazyAttribute(
        lambda c: c.response_message.completion_tokens if c.response_message else 5
    )
    response_message = None
    attempts = 1
