"""A run's queries do not grow with the length of the conversation's history."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chat.models import Message, Role, RunStatus
from chat.services.runs import run_start
from tests.factories import ConversationFactory
from tests.llm_server import text_reply, tool_calls_reply

pytestmark = pytest.mark.django_db


def conversation_with_history(owner, turns):
    conversation = ConversationFactory(owner=owner, system_prompt="Be brief.")
    rows = []
    for turn in range(turns):
        rows.append(
            Message(
                conversation=conversation,
                position=2 * turn,
                role=Role.USER,
                content=f"question {turn}",
            )
        )
        rows.append(
            Message(
                conversation=conversation,
                position=2 * turn + 1,
                role=Role.ASSISTANT,
                content=f"answer {turn}",
            )
        )
    Message.objects.bulk_create(rows)
    return conversation


def queries_of_a_two_pass_run(
    llm_server,
    settings,
    conversation,
    capture_on_commit,
    call=("calculator", '{"expression": "2+2"}'),
):
    settings.TOOLCHAT_TASKS_EAGER = True
    # Deltas coalesce into the answer's own transaction unless the stream lasts
    # longer than the interval; a fixed count needs that not to depend on timing.
    settings.TOOLCHAT_DELTA_INTERVAL_S = 60
    llm_server.push(tool_calls_reply([call]), text_reply("4"))
    if settings.LLM_SUGGESTIONS == "on":
        llm_server.push(text_reply('{"suggestions": ["And 3+3?"]}'))
    with CaptureQueriesContext(connection) as queries, capture_on_commit(execute=True):
        run = run_start(conversation=conversation, content="what is 2+2")
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED, run.error
    failed = run.tool_executions.exclude(status="succeeded").values_list("error", flat=True)
    assert not failed, list(failed)
    return len(queries)


@pytest.mark.parametrize(
    "call",
    [
        ("calculator", '{"expression": "2+2"}'),
        # A tool that makes a resource: its card comes with the event, with no query.
        # (Its row is written by the tool's own thread, which sees only committed rows.)
        pytest.param(
            ("record_note", '{"title": "Boiler serviced"}'),
            marks=pytest.mark.django_db(transaction=True),
        ),
    ],
    ids=["calculator", "record_note"],
)
def test_a_two_pass_turn_takes_at_most_28_queries_at_10_and_10000_messages(
    llm_server, settings, user, django_capture_on_commit_callbacks, call, request
):
    short = queries_of_a_two_pass_run(
        llm_server,
        settings,
        conversation_with_history(user, 5),
        django_capture_on_commit_callbacks,
        call,
    )
    long = queries_of_a_two_pass_run(
        llm_server,
        settings,
        conversation_with_history(user, 5000),
        django_capture_on_commit_callbacks,
        call,
    )
    print(f"queries of a two-pass run: {short} (10 messages), {long} (10,000 messages)")
    assert short == long
    # And the whole turn stays small: the POST's transaction (with the user
    # message's `message.created`, for the user's other tabs), the claim (on
    # PostgreSQL one statement with the read of the run), one read of the history, the first step's announcement, a transaction for each
    # answer and for the tool's result (which announces the second step), and
    # the second answer's first delta. PostgreSQL numbers a batch of events in
    # the same statement that stores it; SQLite needs a second one per batch.
    # (Outside a test transaction, SQLite's own transaction statements count four more.)
    committed = request.node.get_closest_marker("django_db").kwargs.get("transaction", False)
    assert long <= (28 if connection.vendor == "postgresql" else 40 if committed else 36)


def test_the_models_follow_ups_cost_a_few_queries_whatever_the_history(
    llm_server, settings, user, django_capture_on_commit_callbacks
):
    settings.LLM_SUGGESTIONS = "on"
    counts = [
        queries_of_a_two_pass_run(
            llm_server,
            settings,
            conversation_with_history(user, turns),
            django_capture_on_commit_callbacks,
        )
        for turns in (5, 5000)
    ]
    print(f"queries of a two-pass run with the model's follow-ups: {counts}")
    assert counts[0] == counts[1]  # the history the run loop read is used again
    # The call's row, the message's suggestions and their event, with the run's end.
    # Six more than without: the answer and the run's end become two transactions.
    assert counts[1] <= (36 if connection.vendor == "postgresql" else 43)


def test_with_fifty_rules_and_budgets_set_a_turn_costs_what_the_budgets_need_and_no_more(
    llm_server, settings, user, django_capture_on_commit_callbacks
):
    from chat.models import BudgetLimit, ToolPolicy

    def counted() -> int:
        return queries_of_a_two_pass_run(
            llm_server,
            settings,
            conversation_with_history(user, 5),
            django_capture_on_commit_callbacks,
        )

    bare = counted()
    for n in range(50):
        ToolPolicy.objects.create(tools=[f"tool_{n}_*"], decision=("deny", "ask", "allow")[n % 3])
    ruled = counted()
    BudgetLimit.objects.create(period="run", model_calls=10, seconds=300)
    per_run = counted()
    BudgetLimit.objects.create(period="run", tokens=10**6)
    tokens = counted()
    BudgetLimit.objects.create(period="day", tokens=10**9, cost_usd=1000)
    daily = counted()
    print(f"two-pass turn: {bare} bare, {ruled} with 50 rules, {per_run} / {tokens} / {daily}")
    assert ruled == bare  # the rules are read with the claim
    assert per_run == bare  # the limits are read with the conversation's lock
    assert tokens == per_run  # what the run's calls used is read with the claim, then kept
    assert daily == tokens + 1  # the post sums the owner's day's and month's use
