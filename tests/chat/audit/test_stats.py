"""Statistics across runs (chat/audit/stats.py): figures computed by the database, checked
against Python's.

Runs both passes: on PostgreSQL the percentiles come from percentile_cont, on
SQLite from window functions; either way they must equal percentile_cont
computed in Python over the same values.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from chat.audit import stats as stats_module
from chat.audit.buckets import LATENCY_EDGES_MS, time_bin_width
from chat.audit.percentiles import (
    PercentileCont,
    percentile_cont,
    percentiles_by_group,
)
from chat.audit.period import Period, period_preset
from chat.audit.stats import (
    audit_stats,
    latency_histogram,
    model_stats,
    run_totals,
    runs_over_time,
    slowest_runs,
    tool_stats,
)
from chat.models import (
    CallStatus,
    ExecutionStatus,
    Message,
    ModelCall,
    Role,
    Run,
    RunStatus,
    ToolExecution,
)
from tests.chat.audit.test_queries import audited_run
from tests.factories import (
    ConversationFactory,
    ModelCallFactory,
    RunFactory,
    ToolExecutionFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

FRACTIONS = (0.5, 0.95)


def last_hour() -> Period:
    return period_preset("hour")


def a_run(*, created_ago: timedelta = timedelta(minutes=5), **fields) -> Run:
    """A run created `created_ago` before now, with an assistant message to hang calls on."""
    run = RunFactory(**fields)
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - created_ago)
    run.refresh_from_db()
    return run


def asking_message(run: Run) -> Message:
    return Message.objects.create(
        conversation=run.conversation,
        run=run,
        position=Message.objects.filter(conversation=run.conversation).count(),
        role=Role.ASSISTANT,
        content="calling",
    )


# --- Percentiles ----------------------------------------------------------------------


def test_percentile_cont_in_python_interpolates_between_ranks():
    assert percentile_cont([], 0.5) is None
    assert percentile_cont([None], 0.5) is None
    assert percentile_cont([7], 0.95) == 7
    assert percentile_cont([1, 2, 3, 4], 0.5) == 2.5
    assert percentile_cont([100, 200, 300, 400, 1000, 1234, None], 0.95) == pytest.approx(1175.5)
    assert percentile_cont(range(1, 101), 0.95) == pytest.approx(95.05)


def test_tool_percentiles_and_counts_match_python(db):
    rng = random.Random(14)
    run = a_run()
    message = asking_message(run)
    expected: dict[str, list[int | None]] = {}
    statuses = [
        ExecutionStatus.SUCCEEDED,
        ExecutionStatus.FAILED,
        ExecutionStatus.TIMED_OUT,
        ExecutionStatus.INTERRUPTED,
        ExecutionStatus.RUNNING,
    ]
    for name, count in (("one", 1), ("two", 2), ("seven", 7), ("many", 101), ("lumpy", 40)):
        for _ in range(count):
            duration = rng.choice([None, *range(0, 5000)]) if name != "two" else rng.randint(1, 9)
            if name == "lumpy":
                duration = rng.choice([3, 3, 3, 250, 250, 9000, None])
            ToolExecutionFactory(
                run=run,
                message=message,
                name=name,
                duration_ms=duration,
                status=rng.choice(statuses),
                truncated=rng.random() < 0.3,
                finished_at=None,
            )
            expected.setdefault(name, []).append(duration)

    rows = {row.name: row for row in tool_stats(last_hour())}

    assert set(rows) == set(expected)
    for name, durations in expected.items():
        row = rows[name]
        stored = ToolExecution.objects.filter(name=name)
        assert row.calls == len(durations)
        assert (
            row.failed
            == stored.filter(
                status__in=[
                    ExecutionStatus.FAILED,
                    ExecutionStatus.TIMED_OUT,
                    ExecutionStatus.INTERRUPTED,
                ]
            ).count()
        )
        assert row.timeouts == stored.filter(status=ExecutionStatus.TIMED_OUT).count()
        assert row.truncated == stored.filter(truncated=True).count()
        assert row.p50_ms == pytest.approx(percentile_cont(durations, 0.5)), name
        assert row.p95_ms == pytest.approx(percentile_cont(durations, 0.95)), name
        known = [d for d in durations if d is not None]
        assert row.max_ms == (max(known) if known else None)
    # Most called first.
    assert next(row.name for row in tool_stats(last_hour())) == "many"


def test_model_latency_first_token_and_tokens_match_python(db):
    rng = random.Random(7)
    run = a_run()
    expected: dict[str, list[ModelCall]] = {}
    # One row per provider and model: the same model name at two providers is two rows.
    for provider, model, count in (
        ("openai", "small", 3),
        ("local", "small", 5),
        ("openai", "large", 57),
        ("local", "flaky", 12),
    ):
        for step in range(count):
            call = ModelCallFactory(
                run=run,
                step=step,
                provider=provider,
                model=model,
                latency_ms=rng.choice([None, *range(20, 30000)]),
                first_token_ms=rng.choice([None, None, *range(5, 900)]),
                prompt_tokens=rng.choice([None, *range(0, 4000)]),
                completion_tokens=rng.randint(0, 900),
                status=CallStatus.FAILED
                if model == "flaky" and step % 3 == 0
                else CallStatus.SUCCEEDED,
            )
            expected.setdefault(f"{provider}/{model}", []).append(call)

    rows = {row.model: row for row in model_stats(last_hour())}

    for model, calls in expected.items():
        row = rows[model]
        assert row.calls == len(calls)
        assert row.failed == sum(1 for c in calls if c.status == CallStatus.FAILED)
        assert row.prompt_tokens == sum(c.prompt_tokens or 0 for c in calls)
        assert row.completion_tokens == sum(c.completion_tokens for c in calls)
        for fraction, latency, first in (
            (0.5, row.p50_ms, row.p50_first_token_ms),
            (0.95, row.p95_ms, row.p95_first_token_ms),
        ):
            assert latency == pytest.approx(
                percentile_cont([c.latency_ms for c in calls], fraction)
            )
            assert first == pytest.approx(
                percentile_cont([c.first_token_ms for c in calls], fraction)
            )


def test_run_totals_match_python(db):
    latencies = [120, 80, 4000, 950, None, 333, 61000]
    for index, latency in enumerate(latencies):
        a_run(
            status=RunStatus.FAILED if index == 2 else RunStatus.COMPLETED,
            latency_ms=latency,
            model_calls=2,
        )
    a_run(created_ago=timedelta(hours=2), latency_ms=999_999)  # outside the hour

    totals = run_totals(last_hour())

    assert (totals.runs, totals.completed, totals.failed, totals.cancelled) == (7, 6, 1, 0)
    assert totals.model_calls == 14
    assert totals.max_ms == 61000
    assert totals.p50_ms == pytest.approx(percentile_cont(latencies, 0.5))
    assert totals.p95_ms == pytest.approx(percentile_cont(latencies, 0.95))


def test_a_runs_wait_for_a_person_is_left_out_of_its_latency_and_counted_apart(
    db, client, settings
):
    # (latency, of which waiting for a person): people's time is not toolchat's.
    runs = [(1000, None), (7175, 7136), (2000, None), (65_000, 63_800), (500, None)]
    for latency, waited in runs:
        a_run(latency_ms=latency, approval_wait_ms=waited)
    own = [latency - (waited or 0) for latency, waited in runs]

    totals = run_totals(last_hour())

    assert totals.p50_ms == pytest.approx(percentile_cont(own, 0.5))
    assert totals.p95_ms == pytest.approx(percentile_cont(own, 0.95))
    assert totals.max_ms == 2000
    assert totals.waited == 2
    assert totals.wait_p50_ms == pytest.approx(percentile_cont([7136, 63_800], 0.5))
    assert totals.wait_p95_ms == pytest.approx(percentile_cont([7136, 63_800], 0.95))
    bins = {(b.bin.low_ms, b.bin.high_ms): b.runs for b in latency_histogram(last_hour())}
    assert bins[(60_000, None)] == 0  # the run that waited a minute took toolchat 1.2 s
    slow = slowest_runs(last_hour())
    assert [(s.latency_ms, s.approval_wait_ms) for s in slow[:2]] == [
        (2000, None),
        (65_000, 63_800),
    ]
    client.force_login(UserFactory(is_staff=True))
    html = client.get("/audit/").content.decode()
    assert 'data-testid="waited"' in html
    assert "waiting for a person" in html


def test_the_window_function_fallback_agrees_with_python_on_either_database(db):
    """percentiles_by_group is SQLite's way; it runs (and must agree) on PostgreSQL too."""
    rng = random.Random(3)
    run = a_run()
    message = asking_message(run)
    values: dict[str, list[int | None]] = {}
    for name, count in (("a", 1), ("b", 2), ("c", 3), ("d", 20), ("e", 21), ("f", 500)):
        for _ in range(count):
            duration = rng.choice([None, *range(0, 100000)])
            ToolExecutionFactory(
                run=run, message=message, name=name, duration_ms=duration, finished_at=None
            )
            values.setdefault(name, []).append(duration)
    ToolExecutionFactory(
        run=run, message=message, name="nothing", duration_ms=None, finished_at=None
    )

    with CaptureQueriesContext(connection) as queries:
        found = percentiles_by_group(
            ToolExecution.objects.all(), group="name", field="duration_ms", fractions=FRACTIONS
        )

    assert len(queries) == 1
    assert "nothing" not in found  # no value at all: no percentile
    for name, durations in values.items():
        if all(d is None for d in durations):
            assert name not in found
            continue
        for fraction in FRACTIONS:
            assert found[name][fraction] == pytest.approx(percentile_cont(durations, fraction))
    overall = percentiles_by_group(
        ToolExecution.objects.all(), group=None, field="duration_ms", fractions=FRACTIONS
    )
    every = [d for durations in values.values() for d in durations]
    assert overall[None][0.95] == pytest.approx(percentile_cont(every, 0.95))


@pytest.mark.postgres  # percentile_cont is PostgreSQL's: the SQLite pass deselects it
def test_percentile_cont_is_the_ordered_set_aggregate_on_postgresql(db):
    run = a_run()
    message = asking_message(run)
    for duration in (10, 20, 30, 40):
        ToolExecutionFactory(run=run, message=message, duration_ms=duration)
    with CaptureQueriesContext(connection) as queries:
        row = ToolExecution.objects.aggregate(p=PercentileCont("duration_ms", 0.5))
    assert row["p"] == 25
    assert "PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY" in queries[0]["sql"]
    with pytest.raises(ValueError, match="between 0 and 1"):
        PercentileCont("duration_ms", 1.5)


# --- Histogram and time bins ----------------------------------------------------------


def test_the_latency_histogram_bins_at_the_edges(db):
    latencies = [0, 49, 50, 99, 100, 999, 1000, 59_999, 60_000, 3_600_000, None]
    for latency in latencies:
        a_run(latency_ms=latency)

    bins = latency_histogram(last_hour())

    assert len(bins) == len(LATENCY_EDGES_MS) + 1
    counts = {(b.bin.low_ms, b.bin.high_ms): b.runs for b in bins}
    assert counts[(0, 50)] == 2
    assert counts[(50, 100)] == 2
    assert counts[(100, 250)] == 1
    assert counts[(500, 1000)] == 1
    assert counts[(1000, 2500)] == 1
    assert counts[(30_000, 60_000)] == 1
    assert counts[(60_000, None)] == 2
    assert sum(counts.values()) == 10  # the run with no latency is not in it
    assert bins[-1].bin.label == "≥ 1m"


def test_runs_over_time_are_binned_by_the_database(db):
    now = timezone.now()
    period = Period(key="custom", start=now - timedelta(hours=6), end=now)
    assert time_bin_width(period.span_s) == 10 * 60  # 36 bins of 10 minutes
    offsets_min = [0, 1, 9.9, 10, 35, 359]
    for index, minutes in enumerate(offsets_min):
        run = RunFactory(status=RunStatus.FAILED if index == 1 else RunStatus.COMPLETED)
        Run.objects.filter(pk=run.pk).update(created_at=period.start + timedelta(minutes=minutes))
    before = RunFactory()
    Run.objects.filter(pk=before.pk).update(created_at=period.start - timedelta(seconds=1))

    series = runs_over_time(period)

    assert series.width_s == 600
    assert len(series.bins) == 36
    assert series.bins[0].start == period.start
    counts = [b.runs for b in series.bins]
    assert counts[0] == 3
    assert counts[1] == 1
    assert counts[3] == 1
    assert counts[35] == 1
    assert sum(counts) == 6
    assert (series.bins[0].completed, series.bins[0].failed) == (2, 1)


@pytest.mark.parametrize(
    ("span", "width"),
    [
        (timedelta(hours=1), 60),
        (timedelta(days=1), 30 * 60),
        (timedelta(days=7), 3 * 3600),
        (timedelta(days=366), 7 * 86400),
    ],
)
def test_time_bins_are_round_and_at_most_sixty(span, width):
    assert time_bin_width(span.total_seconds()) == width
    assert span.total_seconds() / width <= 60


# --- The slowest runs, and long tables -------------------------------------------------


def test_the_slowest_runs_come_first_with_their_question(db):
    conversation = ConversationFactory(owner=UserFactory(username="ada"))
    for latency in (300, 9000, 1200):
        audited_run(conversation, latency_ms=latency)
    slow = slowest_runs(last_hour())
    assert [s.latency_ms for s in slow] == [9000, 1200, 300]
    assert slow[0].question == "Find my notes, divide 1 by 0, and note it down."
    assert slow[0].owner == "ada"
    assert len(slowest_runs(last_hour(), limit=2)) == 2


def test_more_tools_than_a_table_shows_are_cut(db, monkeypatch):
    monkeypatch.setattr(stats_module, "MAX_GROUPS", 3)
    run = a_run()
    message = asking_message(run)
    for index in range(5):
        for _ in range(index + 1):
            ToolExecutionFactory(run=run, message=message, name=f"tool_{index}")

    stats = audit_stats(last_hour())

    assert [row.name for row in stats.tools] == ["tool_4", "tool_3", "tool_2"]
    assert stats.tools_cut
    assert not stats.models_cut


# --- Queries ----------------------------------------------------------------------------

# One query each for the tools, the models, the runs, the histogram, the time bins and the
# slowest runs; SQLite adds one per percentile column (tools 1, models 2, runs 2: their own
# latency and their waits for people).
STATS_QUERIES = 6 if connection.vendor == "postgresql" else 11


def many_runs(count: int) -> None:
    """`count` runs in the last hour, three model calls and three tool calls each."""
    rng = random.Random(count)
    for index in range(count):
        run = a_run(
            created_ago=timedelta(minutes=rng.randint(1, 50)),
            latency_ms=rng.randint(10, 90000),
            status=rng.choice([RunStatus.COMPLETED, RunStatus.FAILED]),
        )
        message = asking_message(run)
        for call in range(3):
            ModelCallFactory(run=run, step=call, model=f"model-{index % 7}")
            ToolExecutionFactory(run=run, message=message, name=f"tool_{(index + call) % 11}")


def older_runs(count: int) -> None:
    """`count` runs of two days ago, a model call and a tool call each, inserted in bulk."""
    template = a_run(created_ago=timedelta(days=2), status=RunStatus.COMPLETED)
    message = asking_message(template)
    then = timezone.now() - timedelta(days=2)
    runs = Run.objects.bulk_create(
        Run(conversation=template.conversation, status=RunStatus.COMPLETED, latency_ms=index)
        for index in range(count)
    )
    Run.objects.filter(pk__in=[run.pk for run in runs]).update(created_at=then)
    ModelCall.objects.bulk_create(
        ModelCall(run=run, step=0, model="old", started_at=then) for run in runs
    )
    ToolExecution.objects.bulk_create(
        ToolExecution(
            run=run, message=message, tool_call_id=f"old_{index}", name="old", created_at=then
        )
        for index, run in enumerate(runs)
    )
    ToolExecution.objects.filter(name="old").update(created_at=then)


def test_the_statistics_cost_a_fixed_number_of_queries_whatever_the_data(
    django_assert_num_queries,
):
    many_runs(2)
    with django_assert_num_queries(STATS_QUERIES):
        audit_stats(last_hour())
    many_runs(40)
    with django_assert_num_queries(STATS_QUERIES):
        stats = audit_stats(last_hour())
    assert len(stats.tools) == 11
    assert len(stats.models) == 7
    assert stats.totals.runs == 42


# The statistics' tables and the covering index each is read from (chat/models/).
STATS_INDEXES = {
    "chat_run": "run_created_stats",
    "chat_modelcall": "modelcall_started_stats",
    "chat_toolexecution": "toolexec_created_stats",
}


def table_scans(queries: list[str]) -> list[str]:
    """The lines of PostgreSQL's plans that read the statistics' tables.

    Whole-table and bitmap scans are ruled out, so that the planner takes an
    index even on a few rows, and a query the covering index cannot answer
    alone shows as an `Index Scan` (it reads the rows too).
    """
    scans = []
    with connection.cursor() as cursor:
        # Statistics, as a served database has them (without, whether an earlier
        # test's autovacuum had analyzed a table decided the plan).
        for table in STATS_INDEXES:
            cursor.execute(f"ANALYZE {table}")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        for sql in queries:
            cursor.execute(f"EXPLAIN {sql}")
            for (line,) in cursor.fetchall():
                if any(f" on {table} " in f"{line} " for table in STATS_INDEXES):
                    scans.append(line.strip().removeprefix("->  "))
    return scans


@pytest.mark.postgres  # index-only scans are PostgreSQL's
@pytest.mark.parametrize("replays", [False, True], ids=["real traffic", "with replays"])
def test_the_statistics_read_their_covering_indexes_alone_on_postgresql(replays):
    # A served database's tables hold far more than one period: on a few rows the
    # planner takes any index at all, each as cheap as another.
    older_runs(1000)
    many_runs(3)
    with CaptureQueriesContext(connection) as captured:
        audit_stats(last_hour(), replays=replays)

    scans = table_scans([query["sql"] for query in captured.captured_queries])

    assert len(scans) == STATS_QUERIES + 1, scans  # and the slowest runs' rows, by key
    for scan in scans:
        table = next(t for t in STATS_INDEXES if f" on {t} " in f"{scan} ")
        if scan.startswith("Index Scan using chat_run_pkey"):
            continue  # the ten slowest runs' rows, for their question and owner
        assert scan.startswith(f"Index Only Scan using {STATS_INDEXES[table]} on {table}"), scan


def test_each_tools_calls_are_counted_by_what_was_decided(db):
    run = a_run()
    message = asking_message(run)
    decider = UserFactory()
    now = timezone.now()
    made = [
        ("allow", ExecutionStatus.SUCCEEDED, None, None),
        ("allow", ExecutionStatus.FAILED, None, None),
        ("ask", ExecutionStatus.SUCCEEDED, decider, now),  # approved
        ("ask", ExecutionStatus.REJECTED, decider, now),  # rejected
        ("ask", ExecutionStatus.REJECTED, None, now),  # expired
        ("ask", ExecutionStatus.AWAITING_APPROVAL, None, None),  # still waiting
        ("deny", ExecutionStatus.REJECTED, None, None),
    ]
    for decision, status, approved_by, decided_at in made:
        ToolExecutionFactory(
            run=run,
            message=message,
            name="delete_notes",
            status=status,
            policy_decision=decision,
            approved_by=approved_by,
            decided_at=decided_at,
        )
    (row,) = tool_stats(last_hour())
    counted = (row.allowed, row.asked, row.approved, row.rejected, row.expired, row.denied)
    assert counted == (2, 4, 1, 1, 1, 1)
