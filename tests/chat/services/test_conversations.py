"""Writes on conversations: create, and import an OpenAI history (all or nothing)."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import pytest

from chat.exceptions import Conflict, InvalidHistory, InvalidInput
from chat.history import message_to_api, message_to_openai
from chat.models import MAX_STEPS_LIMIT, Message, Mode, Role, RunStatus
from chat.selectors import history_for_model, message_list
from chat.services.conversations import conversation_create, conversation_import_messages
from tests.chat.test_history import assert_pairing, assert_valid_openai
from tests.factories import ConversationFactory, MessageFactory, ResourceFactory, RunFactory

pytestmark = pytest.mark.django_db


def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def conversation_history(resource_id: str) -> list[dict[str, Any]]:
    """Parallel calls answered out of order, a failed tool, and a resource link."""
    return [
        {"role": "system", "content": "Answer in one sentence."},
        {"role": "user", "content": "What is 6*7, what time is it, and note both?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                call("call_calc", "calculator", {"expression": "6*7"}),
                call("call_time", "get_current_time", {"timezone": "UTC"}),
            ],
        },
        # The clock finished first: answers keep the order they were stored in.
        {
            "role": "tool",
            "tool_call_id": "call_time",
            "content": '{"success": true, "time": "12:00"}',
        },
        {"role": "tool", "tool_call_id": "call_calc", "content": '{"success": true, "result": 42}'},
        {
            "role": "assistant",
            "content": "Let me note that.",
            "tool_calls": [call("call_note", "record_note", {"title": "6*7=42 at noon"})],
        },
        {
            "role": "tool",
            "tool_call_id": "call_note",
            "name": "record_note",
            "resource_id": resource_id,
            "content": '{"success": true, "message": "Noted."}',
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("call_search", "search_notes", {"query": "noon"})],
        },
        {
            "role": "tool",
            "tool_call_id": "call_search",
            "content": '{"success": false, "error": "The search index is unavailable."}',
        },
        {"role": "assistant", "content": "6*7 is 42, it is noon, and I noted both."},
    ]


def without_extensions(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same messages without our extension keys, as a model receives them."""
    plain = copy.deepcopy(messages)
    for message in plain:
        message.pop("name", None)
        message.pop("resource_id", None)
    return plain


# --- conversation_create --------------------------------------------------------------


def test_conversation_create_with_defaults(user):
    conversation = conversation_create(owner=user)
    conversation.refresh_from_db()
    assert conversation.owner == user
    assert conversation.mode == Mode.TWO_PASS
    assert conversation.max_steps == 5
    assert (conversation.title, conversation.system_prompt, conversation.model) == ("", "", "")


def test_conversation_create_with_everything(user):
    conversation = conversation_create(
        owner=user,
        title="Groceries",
        mode=Mode.LOOP,
        max_steps=MAX_STEPS_LIMIT,
        system_prompt="Be brief.",
        model="gpt-test",
    )
    conversation.refresh_from_db()
    assert (conversation.title, conversation.mode, conversation.max_steps) == (
        "Groceries",
        "loop",
        MAX_STEPS_LIMIT,
    )
    assert (conversation.system_prompt, conversation.model) == ("Be brief.", "gpt-test")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"mode": "chaos"}, "mode"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": MAX_STEPS_LIMIT + 1}, "max_steps"),
        ({"max_steps": True}, "max_steps"),
        ({"title": "x" * 201}, "title"),
        ({"model": "m" * 129}, "model"),
    ],
)
def test_conversation_create_refuses_bad_input(user, fields, field):
    with pytest.raises(InvalidInput) as error:
        conversation_create(owner=user, **fields)
    assert error.value.field == field
    assert error.value.code == "invalid"
    assert not user.conversations.exists()


# --- conversation_import_messages: the round trip -------------------------------------


def test_import_then_read_back_gives_the_same_messages(user):
    conversation = ConversationFactory(owner=user, system_prompt="You are toolchat.")
    resource = ResourceFactory(owner=user)
    history = conversation_history(str(resource.pk))

    rows = conversation_import_messages(conversation=conversation, messages=history)

    assert [row.position for row in rows] == list(range(len(history)))
    # The model gets the conversation's prompt, then exactly what was imported.
    expected = [{"role": "system", "content": "You are toolchat."}, *without_extensions(history)]
    read_back = history_for_model(conversation=conversation)
    assert read_back == expected
    assert_pairing(read_back)
    assert_valid_openai(read_back)
    assert_valid_openai([message_to_openai(m) for m in message_list(conversation=conversation)])

    shown = [message_to_api(m) for m in message_list(conversation=conversation)]
    tools = {m["tool_call_id"]: m for m in shown if m["role"] == "tool"}
    assert tools["call_note"]["resource_id"] == str(resource.pk)
    assert tools["call_calc"]["resource_id"] is None
    # A missing name is taken from the call the message answers.
    assert {call_id: m["name"] for call_id, m in tools.items()} == {
        "call_time": "get_current_time",
        "call_calc": "calculator",
        "call_note": "record_note",
        "call_search": "search_notes",
    }
    assert all(m["run_id"] is None for m in shown), "imports belong to no run"


def test_an_exported_history_imports_again(user):
    """message_to_api output (the REST shape) is accepted: our extra keys are ignored."""
    source = ConversationFactory(owner=user)
    resource = ResourceFactory(owner=user)
    conversation_import_messages(
        conversation=source, messages=conversation_history(str(resource.pk))
    )
    exported = [message_to_api(m) for m in message_list(conversation=source)]

    target = ConversationFactory(owner=user)
    conversation_import_messages(conversation=target, messages=exported)

    assert history_for_model(conversation=target) == history_for_model(conversation=source)
    assert [message_to_api(m)["resource_id"] for m in message_list(conversation=target)] == [
        m["resource_id"] for m in exported
    ]


def test_import_appends_after_the_last_message(conversation):
    MessageFactory(conversation=conversation, position=0, content="old")
    MessageFactory(conversation=conversation, position=7, content="older gap")

    rows = conversation_import_messages(
        conversation=conversation,
        messages=[{"role": "user", "content": "new"}, {"role": "assistant", "content": "ok"}],
    )

    assert [row.position for row in rows] == [8, 9]
    assert list(conversation.messages.values_list("content", flat=True)) == [
        "old",
        "older gap",
        "new",
        "ok",
    ]


def test_import_can_answer_a_call_stored_earlier(conversation):
    MessageFactory(
        conversation=conversation,
        position=0,
        role=Role.ASSISTANT,
        content=None,
        tool_calls=[call("call_1", "calculator", {"expression": "1+1"})],
    )
    (row,) = conversation_import_messages(
        conversation=conversation,
        messages=[{"role": "tool", "tool_call_id": "call_1", "content": "2"}],
    )
    assert (row.position, row.name) == (1, "calculator")


def test_import_joins_text_parts_and_normalizes(conversation):
    rows = conversation_import_messages(
        conversation=conversation,
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}],
            },
            # As the SDK dumps a response message: empty fields are harmless.
            {
                "role": "assistant",
                "content": "Hi!",
                "tool_calls": [],
                "refusal": None,
                "audio": None,
                "function_call": None,
            },
        ],
    )
    stored = Message.objects.get(pk=rows[0].pk)
    assert stored.content == "Hello\nthere"
    assert message_to_openai(Message.objects.get(pk=rows[1].pk)) == {
        "role": "assistant",
        "content": "Hi!",
    }


def test_import_of_nothing_changes_nothing(conversation):
    before = conversation.updated_at
    assert conversation_import_messages(conversation=conversation, messages=[]) == []
    conversation.refresh_from_db()
    assert conversation.updated_at == before


def test_import_touches_the_conversation(conversation):
    before = conversation.updated_at
    conversation_import_messages(
        conversation=conversation, messages=[{"role": "user", "content": "hi"}]
    )
    conversation.refresh_from_db()
    assert conversation.updated_at > before


# --- conversation_import_messages: bad input ------------------------------------------

ASK = {
    "role": "assistant",
    "content": None,
    "tool_calls": [call("call_1", "calculator", {"expression": "1+1"})],
}
HI = {"role": "user", "content": "hi"}

BAD_IMPORTS: dict[str, tuple[Any, int | None, str]] = {
    "not a list": ({"role": "user", "content": "hi"}, None, "must be a list"),
    "not an object": ([HI, "hello"], 1, "must be an object"),
    "no role": ([HI, {"content": "x"}], 1, "'role' is missing"),
    "unknown role": ([{"role": "robot", "content": "x"}], 0, "unknown role 'robot'"),
    "developer role": ([{"role": "developer", "content": "x"}], 0, "send it as 'system'"),
    "content not text": ([HI, {"role": "user", "content": 5}], 1, "content"),
    "image part": (
        [
            HI,
            HI,
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                ],
            },
        ],
        2,
        "content part 1 has type 'image_url'",
    ),
    "tool without call id": (
        [HI, ASK, {"role": "tool", "content": "2"}],
        2,
        "tool_call_id: Field required",
    ),
    "broken tool call": (
        [
            HI,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}],
            },
        ],
        1,
        "tool_calls[0].function.arguments: Field required",
    ),
    "custom tool call": (
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "f", "input": ""}}],
            }
        ],
        0,
        "only 'function'",
    ),
    "repeated call id": (
        [{**ASK, "tool_calls": ASK["tool_calls"] * 2}],
        0,
        "repeated",
    ),
    "assistant with nothing": ([HI, {"role": "assistant", "content": None}], 1, "needs"),
    "orphan answer": (
        [HI, {"role": "tool", "tool_call_id": "ghost", "content": "x", "name": "f"}],
        1,
        "answers no open call",
    ),
    "second answer": (
        [
            HI,
            ASK,
            {"role": "tool", "tool_call_id": "call_1", "content": "2"},
            {"role": "tool", "tool_call_id": "call_1", "content": "2"},
        ],
        3,
        "answers no open call",
    ),
    "name of another tool": (
        [ASK, {"role": "tool", "tool_call_id": "call_1", "content": "2", "name": "clock"}],
        1,
        "differs",
    ),
    "name on a user message": ([{**HI, "name": "alice"}], 0, "only on tool messages"),
    "refusal": ([{"role": "assistant", "content": "x", "refusal": "no"}], 0, "'refusal'"),
    "resource id not a uuid": (
        [ASK, {"role": "tool", "tool_call_id": "call_1", "content": "2", "resource_id": "r1"}],
        1,
        "not a UUID",
    ),
    "resource that does not exist": (
        [
            ASK,
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": "2",
                "resource_id": str(uuid.uuid4()),
            },
        ],
        1,
        "does not exist",
    ),
}


@pytest.mark.parametrize(("messages", "index", "text"), BAD_IMPORTS.values(), ids=BAD_IMPORTS)
def test_bad_imports_are_refused_and_store_nothing(conversation, messages, index, text):
    MessageFactory(conversation=conversation, position=0, content="kept")

    with pytest.raises(InvalidHistory) as error:
        conversation_import_messages(conversation=conversation, messages=messages)

    assert text in error.value.message
    assert error.value.index == index
    if index is not None:
        assert error.value.message.startswith(f"Message {index}")
        assert error.value.as_dict()["details"] == {"index": index}
    assert error.value.code == "invalid_history"
    assert list(conversation.messages.values_list("content", flat=True)) == ["kept"]


def test_a_resource_of_another_user_is_refused(conversation, other_user):
    foreign = ResourceFactory(owner=other_user)
    messages = [
        ASK,
        {"role": "tool", "tool_call_id": "call_1", "content": "2", "resource_id": str(foreign.pk)},
    ]
    with pytest.raises(InvalidHistory, match="not the conversation owner's"):
        conversation_import_messages(conversation=conversation, messages=messages)
    assert not conversation.messages.exists()


def test_import_waits_for_the_active_run(conversation):
    RunFactory(conversation=conversation, status=RunStatus.RUNNING)
    with pytest.raises(Conflict):
        conversation_import_messages(conversation=conversation, messages=[HI])
    assert not conversation.messages.exists()
