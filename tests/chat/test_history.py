"""The OpenAI codec and the guards: whatever is stored, a model gets a valid history."""

from __future__ import annotations

import itertools
import json
import logging
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam
from pydantic import ConfigDict, TypeAdapter

from chat.history import (
    HistoryRow,
    RunHistory,
    build_model_history,
    message_to_api,
    message_to_openai,
    tool_call_to_openai,
)
from chat.history_guards import _normalized, _paired, _rebuilt, message_chars, repair, trim
from chat.models import Message, Role
from chat.selectors import history_for_model
from tests.factories import (
    ConversationFactory,
    MessageFactory,
    ResourceFactory,
    RunFactory,
    ToolExecutionFactory,
)
from tools.executor import interrupted_result

# The reference: the openai package's own message types. The strict variant
# also refuses keys the TypedDicts do not declare (a request must not carry ours).
# What the model is told of a call whose answer was never stored (the executor's result).
INTERRUPTED_TOOL_CONTENT = interrupted_result("calculator").content

OPENAI_MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])
OPENAI_MESSAGES_STRICT = TypeAdapter(
    list[ChatCompletionMessageParam], config=ConfigDict(extra="forbid")
)


def assert_valid_openai(messages: list[dict[str, Any]]) -> None:
    """Validate against the openai TypedDicts, nested lists included."""
    for adapter in (OPENAI_MESSAGES, OPENAI_MESSAGES_STRICT):
        for message in adapter.validate_python(messages):
            for value in message.values():
                # pydantic checks `Iterable` fields (tool_calls, content parts)
                # only when they are consumed.
                if value is not None and not isinstance(value, str | dict | list):
                    list(value)
    for message in messages:
        if message["role"] == "assistant" and message.get("content") is None:
            assert message.get("tool_calls"), f"assistant without content or calls: {message}"


def assert_pairing(messages: list[dict[str, Any]]) -> None:
    """After each assistant with N tool calls come exactly its N answers; no tool elsewhere."""
    index = 0
    while index < len(messages):
        message = messages[index]
        assert message["role"] != "tool", f"tool message out of place at {index}: {messages}"
        index += 1
        if message["role"] != "assistant" or "tool_calls" not in message:
            continue
        ids = [call["id"] for call in message["tool_calls"]]
        assert ids, f"empty tool_calls at {index - 1}"
        assert len(set(ids)) == len(ids), f"repeated call id in {message}"
        answers = messages[index : index + len(ids)]
        assert [a["role"] for a in answers] == ["tool"] * len(ids), messages
        assert sorted(a["tool_call_id"] for a in answers) == sorted(ids)
        index += len(ids)


def call(call_id: str, name: str = "calculator", arguments: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def asking(*calls: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def answer(call_id: str, content: str = '{"success": true}') -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def user(content: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": content}


def reply(content: str = "done") -> dict[str, Any]:
    return {"role": "assistant", "content": content}


SYSTEM = {"role": "system", "content": "You are helpful."}


# --- Rows to OpenAI -------------------------------------------------------------------


def test_each_role_becomes_exactly_the_openai_shape():
    rows = [
        Message(role=Role.SYSTEM, content="Be brief.", position=0),
        Message(role=Role.USER, content="2+2?", position=1),
        Message(
            role=Role.ASSISTANT,
            content=None,
            tool_calls=[{**call("c1"), "index": 0}],
            latency_ms=12,
            position=2,
        ),
        Message(role=Role.TOOL, content="4", tool_call_id="c1", name="calculator", position=3),
        Message(role=Role.ASSISTANT, content="It is 4.", position=4),
    ]
    converted = [message_to_openai(row) for row in rows]
    assert converted == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        # The streaming `index` is not part of a request.
        {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
        # OpenAI's tool message has no `name`: it stays in the row.
        {"role": "tool", "tool_call_id": "c1", "content": "4"},
        {"role": "assistant", "content": "It is 4."},
    ]
    assert_valid_openai(converted)


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (Message(role=Role.USER, content=""), {"role": "user", "content": ""}),
        (Message(role=Role.SYSTEM, content=None), {"role": "system", "content": ""}),
        (
            Message(role=Role.TOOL, content=None),
            {"role": "tool", "tool_call_id": "", "content": ""},
        ),
        (Message(role=Role.ASSISTANT, content=None), {"role": "assistant", "content": ""}),
        (Message(role=Role.ASSISTANT, content="x"), {"role": "assistant", "content": "x"}),
    ],
)
def test_an_empty_row_is_sent_empty(row, expected):
    assert message_to_openai(row) == expected


@pytest.mark.parametrize(
    ("stored", "sent"),
    [
        (
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        ),
        (
            {"id": "c1", "index": 0, "function": {"name": "f", "arguments": {"x": 1}}},
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
        ),
        (
            {"id": None, "function": {}},
            {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
        ),
        (
            {"id": "c2", "type": "custom", "custom": {"name": "grep", "input": "a.*b"}},
            {"id": "c2", "type": "custom", "custom": {"name": "grep", "input": "a.*b"}},
        ),
        (
            {"id": "c3", "type": "custom", "custom": {}},
            {"id": "c3", "type": "custom", "custom": {"name": "", "input": ""}},
        ),
    ],
)
def test_a_stored_call_is_sent_with_only_the_keys_openai_accepts(stored, sent):
    assert tool_call_to_openai(stored) == sent


def test_an_assistant_row_with_empty_tool_calls_has_none():
    row = Message(role=Role.ASSISTANT, content=None, tool_calls=[], position=0)
    assert message_to_openai(row) == {"role": "assistant", "content": ""}


def assistant_row_for_calls(run):
    return MessageFactory(
        conversation=run.conversation,
        run=run,
        role=Role.ASSISTANT,
        content=None,
        tool_calls=[call("c1", "record_note")],
    )


def test_parsed_arguments_are_sent_as_json_text():
    stored = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
    assert tool_call_to_openai(stored)["function"]["arguments"] == '{"x": 1}'


@pytest.mark.django_db
def test_message_to_api_adds_our_fields():
    resource = ResourceFactory()
    run = RunFactory()
    tool_row = MessageFactory(
        conversation=run.conversation,
        run=run,
        role=Role.TOOL,
        content='{"success": true}',
        tool_call_id="c1",
        name="record_note",
        resource=resource,
    )
    assistant_row = MessageFactory(
        conversation=run.conversation,
        run=run,
        role=Role.ASSISTANT,
        content="Noted.",
        latency_ms=321,
        model="gpt-test",
        prompt_tokens=100,
        completion_tokens=7,
        finish_reason="stop",
        reasoning="The user said something worth noting.",
    )

    tool = message_to_api(tool_row)
    assert tool["resource_id"] == str(resource.pk)
    assert tool["name"] == "record_note"
    assert tool["usage"] is None
    assert tool["run_id"] == str(run.pk)
    assert tool["resource"] == {
        "id": str(resource.pk),
        "kind": resource.kind,
        "title": resource.title,
        "created_at": resource.created_at.isoformat().replace("+00:00", "Z"),
        "created_by_execution_id": None,
    }
    assert "html" not in tool
    imported = MessageFactory(conversation=run.conversation, run=None, role=Role.USER)
    assert message_to_api(imported)["run_id"] is None  # a history import belongs to no run
    assert "superseded_at" not in message_to_api(imported)
    imported.superseded_at = timezone.now()
    assert message_to_api(imported)["superseded_at"] == imported.superseded_at.isoformat().replace(
        "+00:00", "Z"
    )
    asking_row = assistant_row_for_calls(run)
    assert message_to_api(asking_row)["html"] is None  # no text: nothing for a page to show
    execution = ToolExecutionFactory(run=run, message=asking_row)
    resource.created_by_execution = execution
    assert message_to_api(tool_row)["resource"]["created_by_execution_id"] == str(execution.pk)

    assistant = message_to_api(assistant_row)
    assert assistant == {
        "id": str(assistant_row.pk),
        "role": "assistant",
        "content": "Noted.",
        "position": assistant_row.position,
        "created_at": assistant_row.created_at.isoformat().replace("+00:00", "Z"),
        "run_id": str(run.pk),
        "resource_id": None,
        "latency_ms": 321,
        "model": "gpt-test",
        "usage": {"prompt_tokens": 100, "completion_tokens": 7, "cost_usd": None},
        "finish_reason": "stop",
        "html": "<p>Noted.</p>",
        "suggestions": None,
        "reasoning": "The user said something worth noting.",
    }
    assert "reasoning" not in tool
    # The model is sent what it said, not what it thought.
    assert message_to_openai(assistant_row) == {"role": "assistant", "content": "Noted."}
    assistant_row.suggestions = ["And in Paris?"]
    assert message_to_api(assistant_row)["suggestions"] == ["And in Paris?"]


# --- Guards, one at a time ------------------------------------------------------------


def test_a_valid_history_passes_through_unchanged():
    history = [
        SYSTEM,
        user(),
        asking(call("a"), call("b")),
        answer("b"),
        answer("a"),
        reply(),
    ]
    assert repair(history) == history
    assert_pairing(history)


def test_a_missing_answer_is_filled_with_an_error_result():
    repaired = repair([user(), asking(call("a"), call("b")), answer("a"), user("next")])
    assert repaired[:4] == [
        user(),
        asking(call("a"), call("b")),
        answer("a"),
        {"role": "tool", "tool_call_id": "b", "content": INTERRUPTED_TOOL_CONTENT},
    ]
    assert repaired[4] == user("next")
    result = json.loads(repaired[3]["content"])
    assert result["success"] is False
    assert "interrupted" in result["error"]
    assert_pairing(repaired)
    assert_valid_openai(repaired)


def test_a_filled_answer_names_the_call_it_answers():
    unnamed = {"id": "a", "type": "function", "function": {"arguments": "{}"}}
    repaired = repair([user(), asking(call("b", "get_weather"), unnamed)])
    assert repaired[2:] == [
        answer("b", interrupted_result("get_weather").content),
        answer("a", interrupted_result("").content),
    ]


def test_a_run_interrupted_at_the_end_still_gives_a_valid_history():
    repaired = repair([user(), asking(call("a"))])
    assert repaired[-1] == {
        "role": "tool",
        "tool_call_id": "a",
        "content": INTERRUPTED_TOOL_CONTENT,
    }


def test_an_orphan_answer_is_dropped_and_logged(caplog):
    with caplog.at_level(logging.WARNING, logger="chat.history"):
        repaired = repair([user(), answer("ghost"), reply()])
    assert repaired == [user(), reply()]
    assert any("ghost" in record.getMessage() for record in caplog.records)


def test_a_second_answer_to_one_call_is_dropped_and_logged(caplog):
    with caplog.at_level(logging.WARNING, logger="chat.history"):
        repaired = repair([user(), asking(call("a")), answer("a", "first"), answer("a", "again")])
    assert repaired == [user(), asking(call("a")), answer("a", "first")]
    assert [r.levelno for r in caplog.records if "a" in r.getMessage()] == [logging.WARNING]
    assert "already answered" in caplog.records[0].getMessage()


def test_an_answer_separated_from_its_call_is_moved_back():
    repaired = repair([user(), asking(call("a")), user("are you there?"), answer("a"), reply()])
    assert repaired == [user(), asking(call("a")), answer("a"), user("are you there?"), reply()]


def test_an_answer_before_its_call_is_not_an_answer(caplog):
    with caplog.at_level(logging.WARNING, logger="chat.history"):
        repaired = repair([answer("a"), user(), asking(call("a"))])
    assert repaired == [
        user(),
        asking(call("a")),
        {"role": "tool", "tool_call_id": "a", "content": INTERRUPTED_TOOL_CONTENT},
    ]
    assert "no earlier call" in caplog.records[0].getMessage()


def test_an_empty_tool_calls_list_is_normalized_away():
    repaired = repair(
        [
            user(),
            {"role": "assistant", "content": "hello", "tool_calls": []},
            {"role": "assistant", "content": None, "tool_calls": []},
        ]
    )
    assert repaired == [user(), reply("hello"), reply("")]
    assert_valid_openai(repaired)


def test_a_reused_call_id_pairs_with_the_nearest_call():
    # Some providers number calls per response, so "call_0" comes back every turn.
    history = [
        user(),
        asking(call("call_0")),
        user("again"),
        asking(call("call_0")),
        answer("call_0", "second"),
    ]
    repaired = repair(history)
    assert repaired == [
        user(),
        asking(call("call_0")),
        {"role": "tool", "tool_call_id": "call_0", "content": INTERRUPTED_TOOL_CONTENT},
        user("again"),
        asking(call("call_0")),
        answer("call_0", "second"),
    ]


def test_a_repeated_id_inside_one_message_keeps_the_first_call(caplog):
    with caplog.at_level(logging.WARNING, logger="chat.history"):
        repaired = repair([user(), asking(call("a"), call("a", "other")), answer("a")])
    assert repaired == [user(), asking(call("a")), answer("a")]
    assert caplog.records


def test_repair_does_not_change_its_input():
    history = [user(), {"role": "assistant", "content": None, "tool_calls": []}]
    snapshot = json.dumps(history)
    repair(history)
    assert json.dumps(history) == snapshot


# --- Trimming -------------------------------------------------------------------------

LONG = [
    SYSTEM,
    user("first"),
    reply("one"),
    user("second"),
    asking(call("a"), call("b")),
    answer("a"),
    answer("b"),
    reply("two"),
    user("third"),
    asking(call("c")),
    answer("c"),
]


def test_no_budget_keeps_everything():
    assert trim(LONG) == LONG


def test_trim_keeps_the_system_message_and_whole_turns():
    trimmed = trim(LONG, max_messages=8)
    # Cutting between "second" and its tool calls would split the unit; the
    # newest turn that fits starts at "third".
    assert trimmed == [SYSTEM, user("third"), asking(call("c")), answer("c")]
    assert_pairing(trimmed)


def test_trim_drops_the_oldest_turn_first():
    assert trim(LONG, max_messages=10) == [SYSTEM, *LONG[3:]]


def test_trim_keeps_the_newest_turn_even_over_budget():
    assert trim(LONG, max_messages=1) == [SYSTEM, user("third"), asking(call("c")), answer("c")]
    assert trim(LONG, max_chars=0) == [SYSTEM, user("third"), asking(call("c")), answer("c")]


def test_trim_counts_content_and_arguments():
    big = asking(call("a", arguments='{"x": "' + "y" * 50 + '"}'))
    assert message_chars(big) == len(big["tool_calls"][0]["function"]["arguments"])
    history = [user("12345"), big, answer("a", "ok"), user("last")]
    total = sum(message_chars(m) for m in history)
    assert trim(history, max_chars=total) == history
    assert trim(history, max_chars=total - 1) == [user("last")]


def test_trim_without_user_messages_cuts_between_units():
    history = [SYSTEM, reply("greeting"), asking(call("a")), answer("a"), reply("end")]
    assert trim(history, max_messages=2) == [SYSTEM, reply("end")]
    assert trim(history, max_messages=4) == [SYSTEM, asking(call("a")), answer("a"), reply("end")]


@pytest.mark.parametrize(
    ("budget", "error"),
    [
        ({"max_messages": 0}, "max_messages must be at least 1"),
        ({"max_messages": -3}, "max_messages must be at least 1"),
        ({"max_chars": -1}, "max_chars must not be negative"),
    ],
)
def test_trim_refuses_a_meaningless_budget(budget, error):
    with pytest.raises(ValueError, match=error):
        trim(LONG, **budget)


# Each row: a repaired history, the budgets, and what a model is sent.
TRIM_CASES = [
    pytest.param([user("a"), reply("b")], {}, [user("a"), reply("b")], id="no budget"),
    pytest.param(
        [SYSTEM, user("a"), reply("b"), user("c")],
        {"max_messages": 3},
        [SYSTEM, user("c")],
        id="a cut lands on a user message",
    ),
    pytest.param(
        [SYSTEM, user("a"), reply("b"), user("c")],
        {"max_messages": 4},
        [SYSTEM, user("a"), reply("b"), user("c")],
        id="exactly the budget",
    ),
    pytest.param(
        [SYSTEM, user("aaaa"), reply("bb"), user("c")],
        {"max_chars": len("You are helpful.") + 3},
        [SYSTEM, user("c")],
        id="the instructions count against the characters",
    ),
    pytest.param(
        [SYSTEM, asking(call("a")), answer("a"), reply("end")],
        {"max_messages": 3},
        [SYSTEM, reply("end")],
        id="without a user message, a call keeps its answer",
    ),
    pytest.param(
        [asking(call("a")), answer("a"), asking(call("b")), answer("b")],
        {"max_messages": 3},
        [asking(call("b")), answer("b")],
        id="no instructions and no user message",
    ),
    pytest.param([SYSTEM], {"max_messages": 1}, [SYSTEM], id="instructions only"),
]


@pytest.mark.parametrize(("history", "budgets", "expected"), TRIM_CASES)
def test_trim_by_table(history, budgets, expected):
    trimmed = trim(history, **budgets)
    assert trimmed == expected
    assert_pairing(trimmed)


@pytest.mark.parametrize(
    ("message", "size"),
    [
        (user("hello"), 5),
        (reply(""), 0),
        ({"role": "assistant", "content": None}, 0),
        (asking(call("a", arguments='{"x": 1}')), len('{"x": 1}')),
        (asking(call("a", arguments="{}"), content="ok"), 2 + 2),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c", "type": "custom", "custom": {"name": "f", "input": "abc"}}
                ],
            },
            3,
        ),
        # Content parts (a client's request may carry them): their text and refusals count.
        (
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "abc"},
                    {"type": "image_url", "image_url": {"url": "https://example.org/x.png"}},
                ],
            },
            3,
        ),
        ({"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}, 2),
    ],
)
def test_the_size_of_a_message_for_trimming(message, size):
    assert message_chars(message) == size


def test_build_model_history_puts_the_prompt_first_and_repairs():
    rows = [
        Message(role=Role.USER, content="hi", position=0),
        Message(role=Role.ASSISTANT, content=None, tool_calls=[call("a")], position=1),
    ]
    history = build_model_history(rows, system_prompt="Be brief.")
    assert history == [
        {"role": "system", "content": "Be brief."},
        user("hi"),
        asking(call("a")),
        {"role": "tool", "tool_call_id": "a", "content": INTERRUPTED_TOOL_CONTENT},
    ]
    assert build_model_history(rows)[0] == user("hi")


# --- Random histories -----------------------------------------------------------------

ID_POOL = ["call_0", "call_1", "call_2", "call_x"]


@st.composite
def messy_histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Random turns with parallel calls, lost answers, strays, duplicates and moved answers."""
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append(SYSTEM)
    words = st.text("abc ", max_size=12)
    for _ in range(draw(st.integers(0, 5))):
        messages.append(user(draw(words)))
        for _ in range(draw(st.integers(0, 3))):
            # Ids come from a small pool so that reuse across messages happens.
            ids = draw(st.lists(st.sampled_from(ID_POOL), max_size=3, unique=True))
            if not ids:
                tool_calls: list[Any] = []
                messages.append(
                    {"role": "assistant", "content": draw(st.none() | words), "tool_calls": []}
                )
                continue
            tool_calls = [call(i, arguments=json.dumps({"v": draw(words)})) for i in ids]
            messages.append(asking(*tool_calls, content=draw(st.none() | words)))
            answers = [answer(i, draw(words)) for i in ids if not draw(st.booleans())]
            messages.extend(draw(st.permutations(answers)))
        if draw(st.booleans()):
            messages.append(reply(draw(words)))
    # Strays: unknown ids, and copies of real answers, anywhere.
    for stray_id in draw(st.lists(st.sampled_from([*ID_POOL, "ghost"]), max_size=3)):
        messages.insert(draw(st.integers(0, len(messages))), answer(stray_id, "stray"))
    # Late answers: a tool message moved further down, past other roles.
    for _ in range(draw(st.integers(0, 2))):
        tools = [i for i, m in enumerate(messages) if m["role"] == "tool"]
        if tools:
            moved = messages.pop(draw(st.sampled_from(tools)))
            messages.insert(draw(st.integers(0, len(messages))), moved)
    return messages


budgets = st.one_of(st.none(), st.integers(1, 25))
char_budgets = st.one_of(st.none(), st.integers(0, 300))


@settings(max_examples=300, deadline=None)
@given(history=messy_histories(), max_messages=budgets, max_chars=char_budgets)
def test_any_history_becomes_valid(history, max_messages, max_chars):
    repaired = repair(history)
    assert_pairing(repaired)
    assert_valid_openai(repaired)
    assert repair(repaired) == repaired, "repair is idempotent"
    # Repair moves and drops tool answers only: the other messages stay, in order,
    # and no stored answer is used twice.
    assert [(m["role"], m["content"] or "") for m in repaired if m["role"] != "tool"] == [
        (m["role"], m["content"] or "") for m in history if m["role"] != "tool"
    ]
    assert len({id(m) for m in repaired}) == len(repaired)

    trimmed = trim(repaired, max_messages=max_messages, max_chars=max_chars)
    assert_pairing(trimmed)
    assert_valid_openai(trimmed)

    # Leading instructions survive, and the rest is the newest part of the history.
    head_length = 1 if repaired[:1] == [SYSTEM] else 0
    assert trimmed[:head_length] == repaired[:head_length]
    tail = trimmed[head_length:]
    assert tail == repaired[len(repaired) - len(tail) :]
    users = [m for m in repaired if m["role"] == "user"]
    if users:
        # The newest user message is always kept, and a cut lands on a user message.
        assert any(m is users[-1] for m in tail)
        assert tail[0]["role"] == "user" or trimmed == repaired
    fits = (max_messages is None or len(trimmed) <= max_messages) and (
        max_chars is None or sum(message_chars(m) for m in trimmed) <= max_chars
    )
    # Over budget only when the newest turn alone is too big.
    assert fits or not users or tail[0] is users[-1]


@settings(max_examples=500, deadline=None)
@given(history=messy_histories())
def test_a_history_already_paired_is_kept_as_rebuilding_it_would_give(history):
    # `repair` skips the pairing's rebuild when one pass finds nothing to do:
    # the shortcut must give what the rebuild gives, for any history.
    paired = _paired([_normalized(m) for m in history])
    event(f"paired: {paired}")
    assert repair(history) == _rebuilt([_normalized(m) for m in history])
    # What repair gives takes the shortcut the next time (a stored history does).
    assert _paired(repair(history))


@pytest.mark.parametrize("call_id", [1, None], ids=["a number", "none"])
def test_ids_that_are_not_strings_are_repaired_as_rebuilding_gives(call_id):
    # Stored ids are strings; a caller's dicts might not be: no shortcut for them.
    history = [user("q"), asking(call(call_id)), answer(call_id, "1")]
    assert repair(history) == _rebuilt([_normalized(m) for m in history])


@pytest.mark.django_db
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(history=messy_histories(), max_messages=budgets)
def test_any_stored_history_is_read_back_valid(history, max_messages):
    conversation = ConversationFactory(system_prompt="Be brief.")
    rows = []
    for position, message in enumerate(history):
        if message is SYSTEM:
            continue
        fields = dict(message)
        if fields["role"] == "tool":
            fields["name"] = "calculator"
        rows.append(Message(conversation=conversation, position=position, **fields))
    Message.objects.bulk_create(rows)

    # The engine's budget is a number; None here is a history longer than any drawn.
    with override_settings(TOOLCHAT_HISTORY_MAX_MESSAGES=max_messages or 10_000):
        loaded = history_for_model(conversation=conversation)
    assert loaded[0] == {"role": "system", "content": "Be brief."}
    assert_pairing(loaded)
    assert_valid_openai(loaded)


# --- A run's history, kept and appended ------------------------------------------------

IDS = st.sampled_from(["a", "b", "c", "d"])
STORED_ROWS = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.just(None)),
        st.tuples(st.just("assistant"), st.lists(IDS, max_size=3)),
        st.tuples(st.just("tool"), IDS),
    ),
    max_size=14,
)


def stored_rows(spec: list[tuple[str, Any]]) -> list[HistoryRow]:
    """Rows as a history read gives them: reused ids, strays and missing answers included."""
    rows = []
    for position, (role, extra) in enumerate(spec):
        calls = None
        if role == "assistant":
            calls = [call(call_id) for call_id in extra] or None
        content = "said" if role != "assistant" or not calls else None
        tool_call_id = extra if role == "tool" else ""
        rows.append(HistoryRow(position, role, content, calls, tool_call_id))
    return rows


@given(spec=STORED_ROWS, cuts=st.lists(st.integers(0, 14), max_size=4))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_kept_history_gives_what_building_it_whole_gives_after_every_append(spec, cuts):
    rows = stored_rows(spec)
    # Read up to the first cut, then stored a part at a time, asked after each.
    edges = sorted({*(cut for cut in cuts if cut <= len(rows)), len(rows)})
    kept = RunHistory(rows[: edges[0]], system_prompt="Brief.")
    for start, end in itertools.pairwise([edges[0], *edges]):
        for row in rows[start:end]:
            kept.append(row)
        for budget in (None, 3):
            assert kept.messages(max_messages=budget) == build_model_history(
                rows[:end], system_prompt="Brief.", max_messages=budget
            )


def test_an_answer_to_a_call_read_with_the_history_repairs_the_whole_again():
    # A run taken over reads its last answer's calls with the history, then answers them.
    read = stored_rows([("user", None), ("assistant", ["a"])])
    kept = RunHistory(read)
    assert kept.messages()[-1]["content"] == INTERRUPTED_TOOL_CONTENT
    kept.append(HistoryRow(2, "tool", "84", None, "a"))
    assert kept.messages() == [user("said"), asking(call("a")), answer("a", "84")]


def test_a_kept_history_hands_out_lists_a_caller_may_extend():
    kept = RunHistory(stored_rows([("user", None)]))
    kept.messages().append({"role": "system", "content": "an instruction"})
    assert kept.messages() == [user("said")]
