"""Statistics across runs for a period: per tool, per model, run latency and volume.

Everything is aggregated by the database (counts, sums, percentiles, histogram
and time bins), so a read costs the same few queries and returns the same few
rows whatever the number of runs: on PostgreSQL one query per figure below,
on SQLite one more per percentile column (chat/audit/percentiles.py). Rows
are chosen by when they began: a run by `created_at`, a tool call by
`created_at`, a model call by `started_at`. Each has an index for it that
carries the columns read here, so PostgreSQL aggregates a period from the
index alone; hence COUNT(*) or COUNT(status) (never NULL), not COUNT(id), which
would need the row.

A run's latency here is toolchat's: from its post to its end, less the time
it waited for a person's decision on a call (`Run.approval_wait_ms`, set by
the engine at each decision, chat/engine/approvals.py): `OWN_LATENCY_MS`
(chat/models/runs.py), the figure a replay's latency ratio compares too. That
wait is counted apart (how many runs waited, and for how long), as the run's
waterfall shows it apart (chat/audit/waterfall.py): a call that waited an hour for its
approval is not a slow turn.

The statistics are those of real traffic: replays (docs/replay.md), their
model calls and their tool calls are left out unless `replays=True` asks for
them. A run knows it is a replay by `replay_of`, its calls by their own
`replay` flag, each carried by the index too.
"""

from __future__ import annotations

from datetime import timedelta

from django.db.models import CharField, Count, Max, Q, QuerySet, Sum, Value
from django.db.models.functions import Concat, Substr

from chat.audit.buckets import LATENCY_BINS, TimeBin, latency_bin, time_bin_width
from chat.audit.figures import (
    AuditStats,
    HistogramBin,
    ModelRow,
    RunTotals,
    SlowRun,
    TimeBinCount,
    TimeSeries,
    ToolRow,
)
from chat.audit.formatting import QUESTION_CHARS
from chat.audit.percentiles import Percentile, grouped_rows
from chat.audit.period import Period
from chat.audit.queries import FAILED_EXECUTION_STATUSES
from chat.models import (
    OWN_LATENCY_MS,
    CallStatus,
    ExecutionStatus,
    ModelCall,
    PolicyDecision,
    Run,
    RunStatus,
    ToolExecution,
)

# The most rows a table shows: tool names come from models, so there is no telling how many.
MAX_GROUPS = 100
SLOWEST_RUNS = 10


# Each of a tool's calls by what was decided: by the policies, then by a person.
_DECIDED = Q(decided_at__isnull=False)
_REFUSED = Q(status=ExecutionStatus.REJECTED)
DECISION_COUNTS = {
    "allowed": Count("status", filter=Q(policy_decision=PolicyDecision.ALLOW)),
    "asked": Count("status", filter=Q(policy_decision=PolicyDecision.ASK)),
    "approved": Count("status", filter=_DECIDED & ~_REFUSED),
    "rejected": Count("status", filter=_DECIDED & _REFUSED & Q(approved_by__isnull=False)),
    "expired": Count("status", filter=_DECIDED & _REFUSED & Q(approved_by__isnull=True)),
    "denied": Count("status", filter=Q(policy_decision=PolicyDecision.DENY)),
}


def _runs(period: Period, replays: bool) -> QuerySet[Run]:
    """The period's runs, each with `own_ms`: its latency less its wait for people."""
    runs = Run.objects.filter(created_at__gte=period.start, created_at__lt=period.end)
    runs = runs.annotate(own_ms=OWN_LATENCY_MS)
    return runs if replays else runs.filter(replay_of__isnull=True)


def _tool_calls(period: Period, replays: bool) -> QuerySet[ToolExecution]:
    calls = ToolExecution.objects.filter(created_at__gte=period.start, created_at__lt=period.end)
    return calls if replays else calls.filter(replay=False)


def _model_calls(period: Period, replays: bool) -> QuerySet[ModelCall]:
    calls = ModelCall.objects.filter(started_at__gte=period.start, started_at__lt=period.end)
    return calls if replays else calls.filter(replay=False)


def _ms(value: float | None) -> float | None:
    return None if value is None else float(value)


def tool_stats(period: Period, *, limit: int = MAX_GROUPS, replays: bool = False) -> list[ToolRow]:
    """Per tool name, most called first: calls, failures, timeouts, truncations, p50/p95."""
    rows = grouped_rows(
        _tool_calls(period, replays),
        group="name",
        aggregates={
            "calls": Count("*"),
            "failed": Count("status", filter=Q(status__in=FAILED_EXECUTION_STATUSES)),
            "timeouts": Count("status", filter=Q(status=ExecutionStatus.TIMED_OUT)),
            "truncations": Count("truncated", filter=Q(truncated=True)),
            "max_ms": Max("duration_ms"),
            **DECISION_COUNTS,
        },
        percentiles={
            "p50_ms": Percentile("duration_ms", 0.5),
            "p95_ms": Percentile("duration_ms", 0.95),
        },
        order_by=("-calls", "name"),
        limit=limit,
    )
    return [
        ToolRow(
            name=row["name"],
            calls=row["calls"],
            failed=row["failed"],
            timeouts=row["timeouts"],
            truncated=row["truncations"],
            p50_ms=_ms(row["p50_ms"]),
            p95_ms=_ms(row["p95_ms"]),
            max_ms=row["max_ms"],
            **{key: row[key] for key in DECISION_COUNTS},
        )
        for row in rows
    ]


def model_stats(
    period: Period, *, limit: int = MAX_GROUPS, replays: bool = False
) -> list[ModelRow]:
    """Per provider/model, most called first: calls, failures, latency and first-token
    p50/p95, tokens. The same model name at two providers is two rows."""
    rows = grouped_rows(
        _model_calls(period, replays).annotate(
            called=Concat("provider", Value("/"), "model", output_field=CharField())
        ),
        group="called",
        aggregates={
            "calls": Count("*"),
            "failed": Count("status", filter=Q(status=CallStatus.FAILED)),
            "prompt": Sum("prompt_tokens", default=0),
            "completion": Sum("completion_tokens", default=0),
            "cost": Sum("cost_usd"),
        },
        percentiles={
            "p50_ms": Percentile("latency_ms", 0.5),
            "p95_ms": Percentile("latency_ms", 0.95),
            "p50_ft": Percentile("first_token_ms", 0.5),
            "p95_ft": Percentile("first_token_ms", 0.95),
        },
        order_by=("-calls", "called"),
        limit=limit,
    )
    return [
        ModelRow(
            model=row["called"].removeprefix("/"),  # a row from before providers
            calls=row["calls"],
            failed=row["failed"],
            p50_ms=_ms(row["p50_ms"]),
            p95_ms=_ms(row["p95_ms"]),
            p50_first_token_ms=_ms(row["p50_ft"]),
            p95_first_token_ms=_ms(row["p95_ft"]),
            prompt_tokens=int(row["prompt"]),
            completion_tokens=int(row["completion"]),
            cost_usd=None if row["cost"] is None else float(row["cost"]),
        )
        for row in rows
    ]


def run_totals(period: Period, *, replays: bool = False) -> RunTotals:
    """How many runs, how they ended, their latency p50/p95 and their model calls."""
    (row,) = grouped_rows(
        _runs(period, replays),
        group=None,
        aggregates={
            "runs": Count("*"),
            "completed": Count("status", filter=Q(status=RunStatus.COMPLETED)),
            "failed": Count("status", filter=Q(status=RunStatus.FAILED)),
            "cancelled": Count("status", filter=Q(status=RunStatus.CANCELLED)),
            "max_ms": Max("own_ms"),
            "model_calls": Sum("model_calls", default=0),
            "waited": Count("approval_wait_ms"),
        },
        percentiles={
            "p50_ms": Percentile("own_ms", 0.5),
            "p95_ms": Percentile("own_ms", 0.95),
            "wait_p50_ms": Percentile("approval_wait_ms", 0.5),
            "wait_p95_ms": Percentile("approval_wait_ms", 0.95),
        },
    )
    return RunTotals(
        runs=row["runs"],
        completed=row["completed"],
        failed=row["failed"],
        cancelled=row["cancelled"],
        p50_ms=_ms(row.get("p50_ms")),
        p95_ms=_ms(row.get("p95_ms")),
        max_ms=row["max_ms"],
        model_calls=int(row["model_calls"]),
        waited=row["waited"],
        wait_p50_ms=_ms(row.get("wait_p50_ms")),
        wait_p95_ms=_ms(row.get("wait_p95_ms")),
    )


def latency_histogram(period: Period, *, replays: bool = False) -> list[HistogramBin]:
    """How many runs of the period took toolchat how long (waits for people left out), in
    LATENCY_BINS (every bin, empty ones too)."""
    counted = dict(
        _runs(period, replays)
        .filter(latency_ms__isnull=False)
        .order_by()
        .annotate(bin=latency_bin("own_ms"))
        .values("bin")
        .annotate(runs=Count("*"))
        .values_list("bin", "runs")
    )
    return [HistogramBin(bin=b, runs=counted.get(b.index, 0)) for b in LATENCY_BINS]


def runs_over_time(period: Period, *, replays: bool = False) -> TimeSeries:
    """Runs created per time bin across the period (every bin, empty ones too)."""
    width = time_bin_width(period.span_s)
    counted = {
        row["bin"]: row
        for row in _runs(period, replays)
        .order_by()
        .annotate(bin=TimeBin("created_at", start=period.start, width_s=width))
        .values("bin")
        .annotate(
            runs=Count("*"),
            completed=Count("status", filter=Q(status=RunStatus.COMPLETED)),
            failed=Count("status", filter=Q(status=RunStatus.FAILED)),
        )
    }
    bins: list[TimeBinCount] = []
    start = period.start
    index = 0
    while start < period.end:
        row = counted.get(index, {})
        bins.append(
            TimeBinCount(
                start=start,
                runs=row.get("runs", 0),
                completed=row.get("completed", 0),
                failed=row.get("failed", 0),
            )
        )
        index += 1
        start = period.start + timedelta(seconds=width * index)
    return TimeSeries(width_s=width, bins=bins)


def slowest_runs(
    period: Period, *, limit: int = SLOWEST_RUNS, replays: bool = False
) -> list[SlowRun]:
    """The period's slowest runs by toolchat's latency (waits for people left out), slowest
    first, with the start of the message that began each."""
    # The few runs first, then their joins: a LIMIT above the joins would sort every run.
    slowest = (
        _runs(period, replays)
        .filter(latency_ms__isnull=False)
        .order_by("-own_ms", "-created_at")
        .values("pk")[:limit]
    )
    rows = (
        Run.objects.filter(pk__in=slowest)
        .annotate(own_ms=OWN_LATENCY_MS)
        .order_by("-own_ms", "-created_at")
        .annotate(question=Substr("trigger_message__content", 1, QUESTION_CHARS))
        .values(
            "id",
            "created_at",
            "status",
            "latency_ms",
            "approval_wait_ms",
            "own_ms",
            "question",
            "conversation_id",
            "conversation__title",
            "conversation__owner__username",
        )
    )
    return [
        SlowRun(
            id=row["id"],
            created_at=row["created_at"],
            status=row["status"],
            latency_ms=row["latency_ms"],
            approval_wait_ms=row["approval_wait_ms"],
            own_ms=row["own_ms"],
            question=row["question"],
            owner=row["conversation__owner__username"],
            conversation_id=row["conversation_id"],
            conversation_title=row["conversation__title"],
        )
        for row in rows
    ]


def audit_stats(period: Period, *, replays: bool = False) -> AuditStats:
    """Every statistic of the audit overview for `period` (a fixed number of queries);
    replays and their calls counted only with `replays`."""
    tools = tool_stats(period, limit=MAX_GROUPS + 1, replays=replays)
    models = model_stats(period, limit=MAX_GROUPS + 1, replays=replays)
    return AuditStats(
        period=period,
        replays=replays,
        totals=run_totals(period, replays=replays),
        tools=tools[:MAX_GROUPS],
        tools_cut=len(tools) > MAX_GROUPS,
        models=models[:MAX_GROUPS],
        models_cut=len(models) > MAX_GROUPS,
        histogram=latency_histogram(period, replays=replays),
        over_time=runs_over_time(period, replays=replays),
        slowest=slowest_runs(period, replays=replays),
    )
