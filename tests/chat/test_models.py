"""The role rules are enforced by the database itself, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from chat.models import Message, Role, Run, RunStatus, ToolExecution
from tests.factories import ConversationFactory, MessageFactory, RunFactory

CALL = [{"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}]


def insert(conversation, **fields) -> Message:
    """Insert one row, bypassing Python validation: only the database may refuse it."""
    fields.setdefault("position", conversation.messages.count())
    with transaction.atomic():
        return Message.objects.create(conversation=conversation, **fields)


pytestmark = pytest.mark.django_db


VALID_ROWS = [
    {"role": Role.SYSTEM, "content": "You are helpful."},
    {"role": Role.USER, "content": "hi"},
    {"role": Role.ASSISTANT, "content": "hello", "latency_ms": 120},
    {"role": Role.ASSISTANT, "content": None, "tool_calls": CALL, "latency_ms": 80},
    {"role": Role.ASSISTANT, "content": "Let me check.", "tool_calls": CALL},
    {"role": Role.ASSISTANT, "content": "4.", "reasoning": "2+2 is 4."},
    {"role": Role.TOOL, "content": "{}", "tool_call_id": "call_1", "name": "calculator"},
]


@pytest.mark.parametrize("fields", VALID_ROWS, ids=lambda f: f"{f['role']}")
def test_valid_rows_are_accepted(conversation, fields):
    message = insert(conversation, **fields)
    assert Message.objects.filter(pk=message.pk).exists()


INVALID_ROWS = {
    "tool without tool_call_id": {"role": Role.TOOL, "content": "{}", "name": "calculator"},
    "tool without name": {"role": Role.TOOL, "content": "{}", "tool_call_id": "call_1"},
    "tool with empty call id": {
        "role": Role.TOOL,
        "content": "{}",
        "tool_call_id": "",
        "name": "calculator",
    },
    "user with tool_call_id": {"role": Role.USER, "content": "x", "tool_call_id": "call_1"},
    "user with tool_calls": {"role": Role.USER, "content": "x", "tool_calls": CALL},
    "tool with tool_calls": {
        "role": Role.TOOL,
        "content": "{}",
        "tool_call_id": "c",
        "name": "n",
        "tool_calls": CALL,
    },
    "user with latency": {"role": Role.USER, "content": "x", "latency_ms": 5},
    "system with latency": {"role": Role.SYSTEM, "content": "x", "latency_ms": 5},
    "user without content": {"role": Role.USER, "content": None},
    "assistant without content or tool_calls": {"role": Role.ASSISTANT, "content": None},
    "tool without content": {"role": Role.TOOL, "content": None, "tool_call_id": "c", "name": "n"},
    "unknown role": {"role": "developer", "content": "x"},
    "user with reasoning": {"role": Role.USER, "content": "x", "reasoning": "hmm"},
    "tool with reasoning": {
        "role": Role.TOOL,
        "content": "{}",
        "tool_call_id": "c",
        "name": "n",
        "reasoning": "hmm",
    },
}


@pytest.mark.parametrize("fields", INVALID_ROWS.values(), ids=INVALID_ROWS.keys())
def test_invalid_rows_are_refused_by_the_database(conversation, fields):
    with pytest.raises(IntegrityError):
        insert(conversation, **fields)
    assert conversation.messages.count() == 0


def test_position_is_unique_per_conversation(conversation):
    insert(conversation, role=Role.USER, content="one", position=0)
    with pytest.raises(IntegrityError):
        insert(conversation, role=Role.USER, content="two", position=0)
    # The same position in another conversation is fine.
    insert(ConversationFactory(), role=Role.USER, content="three", position=0)


def test_tool_call_id_is_unique_across_executions(conversation):
    run = RunFactory(conversation=conversation)
    message = insert(conversation, role=Role.ASSISTANT, content=None, tool_calls=CALL)
    ToolExecution.objects.create(run=run, message=message, tool_call_id="call_1", name="calculator")
    with pytest.raises(IntegrityError), transaction.atomic():
        ToolExecution.objects.create(run=run, message=message, tool_call_id="call_1", name="x")


def test_one_active_run_per_conversation(conversation):
    RunFactory(conversation=conversation, status=RunStatus.RUNNING)
    with pytest.raises(IntegrityError), transaction.atomic():
        RunFactory(conversation=conversation, status=RunStatus.QUEUED)
    # Finished runs do not count.
    RunFactory(conversation=conversation, status=RunStatus.COMPLETED)
    assert Run.objects.filter(conversation=conversation).count() == 2


@pytest.mark.parametrize("max_steps", [0, 51])
def test_max_steps_out_of_range_is_refused(max_steps):
    with pytest.raises(IntegrityError), transaction.atomic():
        ConversationFactory(max_steps=max_steps)


def test_unknown_mode_is_refused():
    with pytest.raises(IntegrityError), transaction.atomic():
        ConversationFactory(mode="chain")


def test_message_factory_makes_a_valid_user_message():
    message = MessageFactory()
    assert message.role == Role.USER
    assert message.content


def test_calls_stored_before_replays_said_so_are_marked_from_their_run_once_migrated(
    conversation,
):
    from importlib import import_module

    from django.apps import apps

    from chat.models import ModelCall
    from tests.factories import ModelCallFactory, ToolExecutionFactory

    migration = import_module("chat.migrations.0016_replay_flags")
    original = RunFactory(conversation=conversation, status=RunStatus.COMPLETED)
    replica = RunFactory(
        conversation=ConversationFactory(owner=conversation.owner), replay_of=original
    )
    for run in (original, replica):
        asking = MessageFactory(conversation=run.conversation, role=Role.ASSISTANT, content="x")
        ToolExecutionFactory(run=run, message=asking, replay=False)
        ModelCallFactory(run=run, replay=False)

    migration.replays_mark(apps, None)

    for model in (ModelCall, ToolExecution):
        marked = dict(model.objects.values_list("run_id", "replay"))
        assert marked == {original.pk: False, replica.pk: True}


def test_a_recorded_call_is_served_once_per_replay(conversation):
    from tests.factories import ToolExecutionFactory

    original = RunFactory(conversation=conversation, status=RunStatus.COMPLETED)
    asking = MessageFactory(conversation=conversation, role=Role.ASSISTANT, content="x")
    recorded = ToolExecutionFactory(run=original, message=asking)
    replica = RunFactory(conversation=ConversationFactory(owner=conversation.owner))
    asking = MessageFactory(conversation=replica.conversation, role=Role.ASSISTANT, content="x")
    ToolExecutionFactory(run=replica, message=asking, replayed_from=recorded)

    with pytest.raises(IntegrityError), transaction.atomic():
        ToolExecutionFactory(run=replica, message=asking, replayed_from=recorded)
    ToolExecutionFactory(run=RunFactory(), message=asking, replayed_from=recorded)  # another's
