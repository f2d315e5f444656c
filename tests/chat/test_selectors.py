"""Reads: the model's history costs one query at any length; conversations stay private."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from chat.exceptions import ConversationNotFound
from chat.history import message_to_api
from chat.history_rows import _HISTORY_WINDOW, _HISTORY_WINDOW_NEAR, HEAD_POSITIONS
from chat.models import Conversation, Message, Role, RunStatus
from chat.prompts import system_prompt_for
from chat.selectors import conversation_get, history_for_model, message_list, run_user_message
from tests.chat.test_history import INTERRUPTED_TOOL_CONTENT, assert_pairing, assert_valid_openai
from tests.factories import ConversationFactory, MessageFactory, RunFactory

pytestmark = pytest.mark.django_db


def fill(conversation: Conversation, count: int, *, reverse: bool = False) -> None:
    """Store `count` messages of repeating turns: user, tool call, its answer, reply."""
    rows = []
    for position in range(count):
        turn, step = divmod(position, 4)
        call_id = f"call_{turn}"
        if step == 0:
            fields = {"role": Role.USER, "content": f"question {turn}"}
        elif step == 1:
            fields = {
                "role": Role.ASSISTANT,
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "calculator", "arguments": '{"expression": "1+1"}'},
                    }
                ],
                "latency_ms": 5,
            }
        elif step == 2:
            fields = {
                "role": Role.TOOL,
                "content": '{"success": true, "result": 2}',
                "tool_call_id": call_id,
                "name": "calculator",
            }
        else:
            fields = {"role": Role.ASSISTANT, "content": f"answer {turn}", "latency_ms": 5}
        rows.append(Message(conversation=conversation, position=position, **fields))
    Message.objects.bulk_create(rows[::-1] if reverse else rows, batch_size=1000)


@pytest.mark.parametrize("count", [10, 2000])
def test_history_for_model_takes_one_query_at_any_length(
    django_assert_num_queries, conversation, count, settings
):
    fill(conversation, count)
    settings.TOOLCHAT_HISTORY_MAX_MESSAGES = 5000  # within the budget: every row
    with django_assert_num_queries(1):
        history = history_for_model(conversation=conversation)
    # The default system prompt first, then the rows (an interrupted call's answer filled in).
    assert history[0] == {"role": "system", "content": settings.TOOLCHAT_SYSTEM_PROMPT}
    assert len(history) == 1 + count + (1 if count % 4 == 2 else 0)
    assert_pairing(history)


def test_history_for_model_is_valid_and_in_order(conversation):
    conversation.system_prompt = "You are a calculator."
    conversation.save()
    # Inserted backwards: the position decides the order, not the insertion.
    fill(conversation, 4, reverse=True)

    history = history_for_model(conversation=conversation)

    assert history[0] == {"role": "system", "content": "You are a calculator."}
    assert [m["role"] for m in history[1:]] == ["user", "assistant", "tool", "assistant"]
    assert history[-1] == {"role": "assistant", "content": "answer 0"}
    assert_valid_openai(history)


def test_history_for_model_fills_an_interrupted_call(conversation):
    # 6 rows end on an assistant tool call whose answer was never stored.
    fill(conversation, 6)
    history = history_for_model(conversation=conversation)
    assert history[-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": INTERRUPTED_TOOL_CONTENT,
    }
    assert_pairing(history)


def test_history_for_model_trims(conversation, settings):
    fill(conversation, 40)
    settings.TOOLCHAT_HISTORY_MAX_MESSAGES = 9
    history = history_for_model(conversation=conversation)
    assert [m.get("content") for m in history if m["role"] == "user"] == [
        "question 8",
        "question 9",
    ]
    assert_pairing(history)


def test_history_for_model_reads_only_its_conversation(conversation):
    fill(conversation, 4)
    fill(ConversationFactory(), 8)
    assert len(history_for_model(conversation=conversation)) == 1 + 4


def test_message_list_is_ordered_and_one_query(django_assert_num_queries, conversation):
    fill(conversation, 8)
    with django_assert_num_queries(1):
        shown = [message_to_api(m) for m in message_list(conversation=conversation)]
    assert [m["position"] for m in shown] == list(range(8))
    assert shown[2]["name"] == "calculator"


def test_conversation_get_returns_only_the_owners(user, other_user, conversation):
    assert conversation_get(conversation_id=conversation.pk, user=user) == conversation
    assert conversation_get(conversation_id=str(conversation.pk), user=user) == conversation
    for conversation_id, asker in [
        (conversation.pk, other_user),
        (uuid.uuid4(), user),
        ("not-a-uuid", user),
    ]:
        with pytest.raises(ConversationNotFound):
            conversation_get(conversation_id=conversation_id, user=asker)


def test_run_user_message_is_the_message_that_started_the_run(
    conversation, django_assert_num_queries
):
    run = RunFactory(conversation=conversation, status=RunStatus.COMPLETED)
    MessageFactory(conversation=conversation, content="earlier, no run")
    asked = MessageFactory(conversation=conversation, run=run, content="2+2?")
    MessageFactory(conversation=conversation, run=run, role=Role.ASSISTANT, content="4")
    with django_assert_num_queries(1):
        assert run_user_message(run=run) == asked
    assert run_user_message(run=RunFactory(conversation=conversation)) is None


def _random_conversation(owner, seed, turns, *, strays=0.0):
    """A conversation with leading system rows, parallel tool calls, and a long last turn.

    With `strays`, that share of the turns also holds a run of tool messages
    that answer no call (a repair drops them).
    """
    import random

    rng = random.Random(seed)
    conversation = ConversationFactory(owner=owner, system_prompt="Be brief." if seed % 2 else "")
    rows, position = [], 0

    def add(**fields):
        nonlocal position
        rows.append(Message(conversation=conversation, position=position, **fields))
        position += 1

    for _ in range(rng.randint(0, 2)):
        add(role=Role.SYSTEM, content="imported instructions")
    for turn in range(turns):
        add(role=Role.USER, content=f"question {turn}")
        for step in range(rng.randint(0, 3)):
            ids = [f"call_{seed}_{turn}_{step}_{i}" for i in range(rng.randint(1, 3))]
            calls = [
                {"id": i, "type": "function", "function": {"name": "calculator", "arguments": "{}"}}
                for i in ids
            ]
            add(role=Role.ASSISTANT, content=None, tool_calls=calls)
            for call_id in ids:
                add(
                    role=Role.TOOL, tool_call_id=call_id, name="calculator", content='{"result": 1}'
                )
        if rng.random() < strays:
            for stray in range(rng.randint(1, 12)):
                add(
                    role=Role.TOOL,
                    tool_call_id=f"lost_{turn}_{stray}",
                    name="calculator",
                    content="",
                )
        add(role=Role.ASSISTANT, content=f"answer {turn}")
    Message.objects.bulk_create(rows)
    return conversation


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("budget", [3, 8, 25])
def test_a_bounded_history_load_equals_trimming_the_whole_history(user, seed, budget, settings):
    from chat.history import build_model_history

    conversation = _random_conversation(user, seed, turns=15 + seed)
    everything = list(Message.objects.filter(conversation=conversation).order_by("position"))
    expected = build_model_history(
        everything, system_prompt=system_prompt_for(conversation), max_messages=budget
    )
    settings.TOOLCHAT_HISTORY_MAX_MESSAGES = budget
    assert history_for_model(conversation=conversation) == expected


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("superseded", [0.3, 0.9])
def test_a_bounded_history_load_equals_trimming_when_rows_were_superseded(
    user, seed, superseded, settings
):
    # Regenerated answers and edited questions leave superseded rows among the
    # newest: so many, at 0.9, that the window's edge is beyond the rows looked at first.
    import random

    from django.utils import timezone

    from chat.history import build_model_history

    conversation = _random_conversation(user, seed, turns=40)
    rows = list(Message.objects.filter(conversation=conversation).order_by("position"))
    rng = random.Random(seed)
    tail = [row.pk for row in rows[len(rows) // 2 :] if rng.random() < superseded]
    Message.objects.filter(pk__in=tail).update(superseded_at=timezone.now())
    current = [row for row in rows if row.pk not in set(tail)]
    expected = build_model_history(
        current, system_prompt=system_prompt_for(conversation), max_messages=8
    )
    settings.TOOLCHAT_HISTORY_MAX_MESSAGES = 8
    assert history_for_model(conversation=conversation) == expected


def run_history_sent(run) -> list[dict]:
    """What a run's first model call is sent of its history (chat/engine/request.py)."""
    from chat.engine.request import history_load
    from chat.history_rows import history_messages

    return history_messages(history_load(run))


def whole_history_trimmed(conversation, run) -> list[dict]:
    """What trimming every current row of the conversation gives, for a run's budgets."""
    from django.conf import settings

    from chat.history import build_model_history
    from chat.prompts import run_system_prompt

    return build_model_history(
        Message.objects.filter(conversation=conversation, superseded_at=None).order_by("position"),
        system_prompt=run_system_prompt(run),
        max_messages=settings.TOOLCHAT_HISTORY_MAX_MESSAGES,
        max_chars=settings.TOOLCHAT_HISTORY_MAX_CHARS,
    )


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("budget", [3, 8, 16, 25])
@pytest.mark.parametrize("claimed", [False, True], ids=["unclaimed", "claimed"])
@pytest.mark.parametrize("strays", [0.0, 0.5], ids=["paired", "strays"])
def test_a_run_s_history_is_what_trimming_the_whole_conversation_gives(
    user, settings, seed, budget, claimed, strays
):
    # A run reads the budget and a quarter first, and twice the budget when it
    # cannot tell that no older turn would fit: with stray answers, which
    # repair drops, a window's rows may give fewer messages than the budget.
    settings.TOOLCHAT_HISTORY_MAX_MESSAGES = budget
    conversation = _random_conversation(user, seed, turns=15 + seed, strays=strays)
    run = RunFactory(conversation=conversation)
    if claimed:
        vars(run)["last_position"] = conversation.messages.order_by("position").last().position
    assert run_history_sent(run) == whole_history_trimmed(conversation, run)


def sent_after_forty_rows(user, rows: list[Message], django_assert_num_queries, *, reads: int):
    """What a run is sent of 40 rows of `fill` and then `rows`, read in `reads` statements."""
    conversation = ConversationFactory(owner=user)
    fill(conversation, 40)
    for position, row in enumerate(rows, start=40):
        row.pk, row.conversation, row.position = None, conversation, position
    Message.objects.bulk_create(rows)
    run = RunFactory(conversation=conversation)
    with django_assert_num_queries(reads):
        sent = run_history_sent(run)
    assert sent == whole_history_trimmed(conversation, run)
    return sent


def test_a_run_reads_its_history_again_when_an_older_turn_might_have_fit(
    user, settings, django_assert_num_queries
):
    settings.TOOLCHAT_HISTORY_MAX_MESSAGES = 16  # a first read of 20 rows, then 32
    conversation = ConversationFactory(owner=user)
    fill(conversation, 400)  # turns of 4 rows: trimming the 20 rows cuts some
    run = RunFactory(conversation=conversation)
    with django_assert_num_queries(1):
        sent = run_history_sent(run)
    assert len(sent) == 13
    assert sent == whole_history_trimmed(conversation, run)

    # A turn of 16 stray tool messages across the window's edge: the rows read
    # from the window's first user message are 4, and the stray turn may give
    # as few as 2 messages, so an older turn might fit. It does: repair drops
    # the strays, and two turns of `fill` fit besides. The wider window (32
    # rows) gives 15 messages, and what it left out might add a single one
    # (a reply, as far as it can tell): so every row is read.
    rows = [
        Message(role=Role.USER, content="noisy"),
        *(
            Message(role=Role.TOOL, tool_call_id=f"lost_{i}", name="calculator", content="")
            for i in range(16)
        ),
        Message(role=Role.ASSISTANT, content="ok"),
        Message(role=Role.USER, content="again"),
        Message(role=Role.ASSISTANT, content="sure"),
        Message(role=Role.USER, content="more"),
        Message(role=Role.ASSISTANT, content="fine"),
    ]
    sent = sent_after_forty_rows(user, rows, django_assert_num_queries, reads=3)
    assert [m["content"] for m in sent[-6:]] == ["noisy", "ok", "again", "sure", "more", "fine"]
    assert len(sent) == 15

    # The same turn with its calls made, across the same edge: the window holds
    # only the answers, which might have been strays too, so it is read again.
    ids = [f"call_{i}" for i in range(15)]
    calls = [
        {"id": i, "type": "function", "function": {"name": "calculator", "arguments": "{}"}}
        for i in ids
    ]
    rows[1:17] = [
        Message(role=Role.ASSISTANT, tool_calls=calls),
        *(Message(role=Role.TOOL, tool_call_id=i, name="calculator", content="1") for i in ids),
    ]
    assert len(sent_after_forty_rows(user, rows, django_assert_num_queries, reads=2)) == 5

    # A turn of 16 answers without calls (an imported conversation's) across
    # the edge: those read could not fit beside the 4 newest, so no older turn could.
    rows[1:17] = [Message(role=Role.ASSISTANT, content=f"part {i}") for i in range(16)]
    assert len(sent_after_forty_rows(user, rows, django_assert_num_queries, reads=1)) == 5


def _pairs(count: int) -> list[Message]:
    return [
        row
        for i in range(count)
        for row in (
            Message(role=Role.USER, content=f"q{i}"),
            Message(role=Role.ASSISTANT, content=f"a{i}"),
        )
    ]


def _stray(i: int) -> Message:
    return Message(role=Role.TOOL, tool_call_id=f"lost{i}", name="calculator", content="")


# Rows before a window's first user message that are not an older turn (found
# in review): each history must still be what trimming the whole gives.
UNUSUAL_STARTS = {
    # Leading system rows reaching into the window: trimming keeps them all.
    "leading system rows in the window": lambda: [
        *(Message(role=Role.SYSTEM, content=f"sys{i}") for i in range(15)),
        *_pairs(5),
    ],
    # An assistant's greeting before any user message: a cut at 0 keeps it.
    "a greeting first": lambda: [
        Message(role=Role.ASSISTANT, content="hi"),
        Message(role=Role.USER, content="q"),
        *(_stray(i) for i in range(5)),
        Message(role=Role.ASSISTANT, content="a"),
        *_pairs(6),
    ],
    # Stray answers, then a system row: once repair drops them, it leads.
    "strays, then instructions": lambda: [
        *(_stray(i) for i in range(21)),
        Message(role=Role.SYSTEM, content="late instructions"),
        *_pairs(5),
    ],
    # A turn of 25 stray answers: twice the budget still sees only strays.
    "strays past the wider window": lambda: [
        *_pairs(2),
        Message(role=Role.USER, content="q2"),
        *(_stray(i) for i in range(25)),
        Message(role=Role.ASSISTANT, content="a2"),
        *_pairs(1),
    ],
}


@pytest.mark.parametrize("claimed", [False, True], ids=["unclaimed", "claimed"])
@pytest.mark.parametrize("budget", [8, 16])
@pytest.mark.parametrize("start", UNUSUAL_STARTS)
def test_a_run_s_history_is_the_whole_s_trimming_whatever_precedes_its_window(
    user, settings, start, budget, claimed
):
    settings.TOOLCHAT_HISTORY_MAX_MESSAGES = budget
    conversation = ConversationFactory(owner=user, system_prompt="P")
    rows = UNUSUAL_STARTS[start]()
    for position, row in enumerate(rows):
        row.conversation, row.position = conversation, position
    Message.objects.bulk_create(rows)
    run = RunFactory(conversation=conversation)
    if claimed:
        vars(run)["last_position"] = len(rows) - 1
    assert run_history_sent(run) == whole_history_trimmed(conversation, run)
    assert history_for_model(conversation=conversation) == whole_history_trimmed(conversation, run)


@st.composite
def hostile_conversations(draw: st.DrawFn) -> tuple[list[dict], set[int]]:
    """Rows and the positions superseded: instructions and strays before the first turn,
    calls with reused ids and missing, repeated or unknown answers, runs of strays."""
    ids = st.sampled_from([f"c{i}" for i in range(6)])
    text = st.sampled_from(["", "x", "hello", "a longer piece of text " * 3])

    def tool(call_id: str) -> dict:
        return {
            "role": Role.TOOL,
            "tool_call_id": call_id,
            "name": "calculator",
            "content": draw(text),
        }

    rows: list[dict] = [
        {"role": Role.SYSTEM, "content": draw(text)} for _ in range(draw(st.integers(0, 30)))
    ]
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from([Role.ASSISTANT, Role.TOOL, Role.SYSTEM]))
        rows.append(tool(draw(ids)) if kind == Role.TOOL else {"role": kind, "content": draw(text)})
    for _turn in range(draw(st.integers(1, 14))):
        rows.append({"role": Role.USER, "content": draw(text)})
        for _step in range(draw(st.integers(0, 3))):
            kind = draw(st.sampled_from(["call", "call", "strays", "text", "system"]))
            if kind == "call":
                called = draw(st.lists(ids, min_size=1, max_size=4))
                calls = [
                    {
                        "id": i,
                        "type": "function",
                        "function": {"name": "calculator", "arguments": "{}"},
                    }
                    for i in called
                ]
                rows.append(
                    {"role": Role.ASSISTANT, "content": draw(st.none() | text), "tool_calls": calls}
                )
                rows.extend(
                    tool(i) for i in draw(st.lists(st.sampled_from([*called, "zz"]), max_size=6))
                )
            elif kind == "strays":
                rows.extend(tool(draw(ids)) for _ in range(draw(st.integers(1, 25))))
            else:
                role = Role.SYSTEM if kind == "system" else Role.ASSISTANT
                rows.append({"role": role, "content": draw(text)})
        if draw(st.booleans()):
            rows.append({"role": Role.ASSISTANT, "content": draw(text)})
    superseded = draw(st.sets(st.integers(0, len(rows) - 1), max_size=max(1, len(rows) // 5)))
    return rows, superseded


@hypothesis_settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    spec=hostile_conversations(),
    budget=st.integers(3, 30),
    max_chars=st.sampled_from([400_000, 0, 5, 30, 100, 300]),
    claimed=st.booleans(),
)
def test_any_run_s_history_is_what_trimming_the_whole_conversation_gives(
    user, settings, spec, budget, max_chars, claimed
):
    # Written after a review found shapes the first version got wrong (and the
    # one before it too): it holds `history_kept` to the whole's trimming.
    from django.utils import timezone

    rows, superseded = spec
    settings.TOOLCHAT_HISTORY_MAX_MESSAGES = budget
    settings.TOOLCHAT_HISTORY_MAX_CHARS = max_chars
    conversation = ConversationFactory(owner=user, system_prompt="P")
    now = timezone.now()
    Message.objects.bulk_create(
        Message(
            conversation=conversation,
            position=position,
            superseded_at=now if position in superseded else None,
            **fields,
        )
        for position, fields in enumerate(rows)
    )
    run = RunFactory(conversation=conversation)
    if claimed:
        vars(run)["last_position"] = len(rows) - 1
    assert run_history_sent(run) == whole_history_trimmed(conversation, run)


def test_a_bounded_history_load_takes_one_query_at_any_length(
    user, django_assert_num_queries, settings
):
    settings.TOOLCHAT_HISTORY_MAX_MESSAGES = 50
    for turns in (10, 1000):
        conversation = _random_conversation(user, 1, turns=turns)
        with django_assert_num_queries(1):
            history = history_for_model(conversation=conversation)
        assert len(history) <= 51


def rows_read(node: dict) -> float:
    """Rows a PostgreSQL plan's scans read: those they returned and those their filters dropped.

    A bitmap's index entries are counted once, as the rows its heap scan reads.
    """
    read = 0.0
    if "Scan" in node["Node Type"] and node["Node Type"] != "Bitmap Index Scan":
        kept = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
        read += (kept + node.get("Rows Removed by Index Recheck", 0)) * node.get("Actual Loops", 1)
    return read + sum(rows_read(child) for child in node.get("Plans", []))


@pytest.mark.postgres
@pytest.mark.parametrize("claimed", [False, True], ids=["read alone", "read by a claimed run"])
@pytest.mark.parametrize("analyzed", [True, False], ids=["statistics", "no statistics yet"])
def test_a_bounded_history_load_reads_its_window_not_the_conversation(
    user, claimed, analyzed, settings
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from chat.history_rows import history_read

    # A table of many short conversations, as PostgreSQL's statistics know it
    # (or before it has any: a new database, until autovacuum's first ANALYZE).
    for _ in range(150):
        fill(ConversationFactory(owner=user), 24)
    if analyzed:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE chat_message")
    # Grown since the statistics were taken, as most conversations are: PostgreSQL
    # expects few rows of it, and must still not read them all.
    conversation = ConversationFactory(owner=user)
    fill(conversation, 6000)
    with CaptureQueriesContext(connection) as queries:
        if claimed:  # the claim read the conversation's last position (chat/engine/claim_read.py)
            rows = history_read(conversation=conversation, window=800, last_position=5999).rows
            assert rows[-1].position == 5999
        else:
            settings.TOOLCHAT_HISTORY_MAX_MESSAGES = 400
            assert len(history_for_model(conversation=conversation)) <= 401
    (query,) = queries.captured_queries
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {query['sql']}")
        (plan,) = cursor.fetchone()[0]
    # The window is 800 rows, and its edge is looked for among the newest 1,600:
    # reading the whole conversation (6,000 rows, several times) would make the
    # turn's history grow with its length.
    assert rows_read(plan["Plan"]) <= 3200, json.dumps(plan, indent=1)[:4000]
    # A connection that has run it five times keeps it prepared (the settings'
    # DATABASE_PREPARED_STATEMENTS), and PostgreSQL may then run one plan made
    # for any values: that plan must read the window alone too.
    if not connection.features.uses_server_side_binding:
        return  # nothing is prepared (DATABASE_PREPARED_STATEMENTS=0)
    window = 800 if claimed else 400 + 400 // 4
    last = 5999 if claimed else None
    generic = generic_plan(
        lambda: history_read(conversation=conversation, window=window, last_position=last),
        _HISTORY_WINDOW_NEAR if claimed else _HISTORY_WINDOW,
        {
            "conversation": conversation.pk,
            "near": 5999,
            "reach": 2 * window,
            "edge": window - 1,
            "head": HEAD_POSITIONS,
        },
    )
    assert rows_read(generic["Plan"]) <= 4 * window, json.dumps(generic, indent=1)[:4000]


def generic_plan(read: Callable[[], object], sql: str, params: dict[str, Any]) -> dict[str, Any]:
    """EXPLAIN ANALYZE of the statement `read` runs, prepared by this connection, in its generic plan.

    The plan PostgreSQL may keep for any values, forced (for the rest of the
    test's transaction) before `read` runs often enough to be prepared; then
    the prepared statement itself, with the parameter types psycopg gave it,
    is explained with `params` (named as `sql` names them).
    """
    from django.db import connection

    names: list[str] = []
    for name in re.findall(r"%\((\w+)\)s", sql):
        if name not in names:
            names.append(name)  # psycopg numbers them in this order: $1, $2, ...
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        for _ in range(6):
            read()
        cursor.execute(
            "SELECT name, parameter_types::text[] FROM pg_prepared_statements"
            " WHERE NOT from_sql AND statement LIKE %s",
            ["%1 AS part%"],
        )
        ((name, types),) = cursor.fetchall()
        values = ", ".join(
            f"'{params[key]}'::{kind}" for key, kind in zip(names, types, strict=True)
        )
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {name} ({values})")
        (plan,) = cursor.fetchone()[0]
    return plan


@pytest.mark.postgres
def test_a_connection_prepares_the_history_read_it_keeps_running(user):
    """DATABASE_PREPARED_STATEMENTS: PostgreSQL plans a turn's statements once a connection."""
    from django.db import connection

    from chat.history_rows import history_read

    if not connection.features.uses_server_side_binding:
        pytest.skip("DATABASE_PREPARED_STATEMENTS=0: nothing is prepared")

    conversation = ConversationFactory(owner=user)
    fill(conversation, 40)

    def prepared() -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements WHERE NOT from_sql")
            return [row[0] for row in cursor.fetchall() if "AS part" in row[0]]

    runs = [
        history_read(conversation=conversation, window=20, last_position=39).rows for _ in range(7)
    ]
    assert runs[-1] == runs[0]
    assert [row.position for row in runs[-1]] == list(range(20, 40))
    # psycopg prepares it at its sixth run on this connection, with $n placeholders.
    (statement,) = prepared()
    assert "$1" in statement
