"""factory_boy factories for toolchat's models, and `finished_run`: a whole run as the engine stores it."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from chat.live.event_types import EVENT_CLASSES, EVENT_FIELDS, Event, event_from
from chat.models import (
    CallStatus,
    Conversation,
    ExecutionStatus,
    Message,
    ModelCall,
    ReplayMode,
    ReplayTools,
    Role,
    Run,
    RunEvent,
    RunStatus,
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
    replay = factory.LazyAttribute(lambda e: e.run.replay_of_id is not None)


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
    replay = factory.LazyAttribute(lambda c: c.run.replay_of_id is not None)


# --- A finished run -------------------------------------------------------------------


@dataclass(frozen=True)
class CallSpec:
    """One tool call of a finished run: what the model asked, and how the call went.

    `content` is what the model was sent (by default the result as JSON);
    `resource_title`, when given, names a note the call made, which the tool
    message then points at.
    """

    name: str = "calculator"
    arguments: dict[str, Any] = field(default_factory=lambda: {"expression": "12*7"})
    status: str = ExecutionStatus.SUCCEEDED
    result: Any = field(
        default_factory=lambda: {"success": True, "expression": "12*7", "result": 84}
    )
    content: str | None = None
    truncated: bool = False
    error: str = ""
    duration_ms: int = 3
    tool_call_id: str | None = None
    resource_title: str | None = None


@dataclass(frozen=True)
class StepSpec:
    """One model call of a finished run, with the figures of the message it answered with."""

    latency_ms: int
    prompt_tokens: int
    completion_tokens: int
    tools_offered: list[str] = field(default_factory=list)
    message_count: int = 2
    first_token_ms: int | None = None


_call_numbers = itertools.count(1)


def finished_run(
    conversation: Conversation,
    *,
    question: str = "What is 12*7?",
    calls: Sequence[CallSpec] = (CallSpec(),),
    answer: str = "12 times 7 is 84.",
    status: str = RunStatus.COMPLETED,
    latency_ms: int = 1000,
    call_step: StepSpec = StepSpec(300, 40, 9, ["calculator", "get_current_time"]),
    answer_step: StepSpec = StepSpec(200, 60, 8),
    request_hash: str = "",
    events: Sequence[str] = (),
    replay_of: Run | None = None,
    replay_mode: str = ReplayMode.FREE,
) -> Run:
    """A finished two-pass run appended to `conversation`, stored as the engine stores one.

    The user's question (the run's trigger message), the assistant message
    asking for `calls`, one audit row and one tool message per call, the
    answer, a model call row per step and, with `events`, those run events
    numbered on from the conversation's last seq. With `replay_of`, a replay of
    that run with recorded tools (`replay_mode`: free or forced).
    """
    start = Message.objects.filter(conversation=conversation).count()
    now = timezone.now()
    run = RunFactory(
        conversation=conversation,
        status=status,
        steps=1,
        model_calls=2,
        started_at=now,
        finished_at=now + timedelta(milliseconds=latency_ms),
        latency_ms=latency_ms,
        replay_of=replay_of,
        replay_tools=ReplayTools.RECORDED if replay_of else "",
        replay_mode=replay_mode if replay_of else "",
    )
    run.trigger_message = Message.objects.create(
        conversation=conversation, run=run, position=start, role=Role.USER, content=question
    )
    run.save(update_fields=["trigger_message"])
    ids = [call.tool_call_id or f"call_{next(_call_numbers):06d}" for call in calls]
    asking = _reply(
        run,
        start + 1,
        call_step,
        content=None,
        tool_calls=[
            {
                "id": call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call_id, call in zip(ids, calls, strict=True)
        ],
        finish_reason="tool_calls",
    )
    for position, (call_id, call) in enumerate(zip(ids, calls, strict=True), start=start + 2):
        _call_store(run, asking, position, call_id, call, started_at=now)
    final = _reply(run, start + 2 + len(calls), answer_step, content=answer, finish_reason="stop")
    for step, (purpose, spec, response) in enumerate(
        (("tools", call_step, asking), ("compose", answer_step, final)), start=1
    ):
        ModelCallFactory(
            run=run,
            step=step,
            purpose=purpose,
            message_count=spec.message_count,
            request_hash=request_hash,
            tools_offered=spec.tools_offered,
            response_message=response,
            started_at=now + timedelta(milliseconds=step),
            first_token_ms=spec.first_token_ms,
        )
    if events:
        first = conversation.last_event_seq + 1
        conversation.last_event_seq += len(events)
        conversation.save(update_fields=["last_event_seq"])
        for seq, type_ in enumerate(events, start=first):
            RunEvent.objects.create(
                conversation=conversation,
                run=run,
                seq=seq,
                type=type_,
                data={"run_id": str(run.pk)},
            )
    return run


def _reply(run: Run, position: int, step: StepSpec, **fields: Any) -> Message:
    """An assistant message of `run` with the figures of the model call that made it."""
    return Message.objects.create(
        conversation=run.conversation,
        run=run,
        position=position,
        role=Role.ASSISTANT,
        latency_ms=step.latency_ms,
        model="test-model",
        prompt_tokens=step.prompt_tokens,
        completion_tokens=step.completion_tokens,
        **fields,
    )


def _call_store(
    run: Run, asking: Message, position: int, call_id: str, call: CallSpec, *, started_at: Any
) -> None:
    """A call's audit row, the resource it made (if any) and its tool message."""
    content = call.content if call.content is not None else json.dumps(call.result)
    execution = ToolExecutionFactory(
        run=run,
        message=asking,
        tool_call_id=call_id,
        name=call.name,
        arguments=call.arguments,
        status=call.status,
        result=call.result,
        content=content,
        # The raw result's size: more than `content` holds when that was cut.
        result_chars=len(json.dumps(call.result)) if call.result is not None else len(content),
        truncated=call.truncated,
        error=call.error,
        started_at=started_at,
        duration_ms=call.duration_ms,
    )
    resource = None
    if call.resource_title is not None:
        resource = ResourceFactory(
            owner=run.conversation.owner,
            title=call.resource_title,
            created_by_execution=execution,
        )
    Message.objects.create(
        conversation=run.conversation,
        run=run,
        position=position,
        role=Role.TOOL,
        tool_call_id=call_id,
        name=call.name,
        content=content,
        resource=resource,
    )


def event_make(type: str, **fields: Any) -> Event:
    """An event of `type`: `fields`, and a placeholder for each other required one."""
    required = [name for name, needed in EVENT_FIELDS[EVENT_CLASSES[type]] if needed]
    return event_from(type, {**{name: f"<{name}>" for name in required}, **fields})
