"""Reads for the staff audit pages and the admin: runs with their latency, and a run's timeline.

Staff see every user's runs here, so unlike chat/selectors.py these reads take
no user: the views that call them are the ones that check `is_staff`. Each
read costs a fixed number of queries whatever the size of the run or the page.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.core.paginator import Page, Paginator
from django.db.models import Count, Prefetch, Q, QuerySet

from chat.exceptions import RunNotFound
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

RUNS_PER_PAGE = 50

# A tool call that did not give the model a real result: what an auditor looks for first.
FAILED_EXECUTION_STATUSES = (
    ExecutionStatus.FAILED,
    ExecutionStatus.TIMED_OUT,
    ExecutionStatus.INTERRUPTED,
)


def audit_run_page(*, page: int | str | None = 1, status: str = "") -> Page[Run]:
    """Recent runs, newest first, each with `tool_calls` and `failures` counted (two queries).

    `failures` counts the run's failed, timed-out or interrupted tool calls and
    its failed model calls. An unknown `status` is ignored.
    """
    runs: QuerySet[Run] = (
        Run.objects.select_related("conversation__owner")
        .annotate(
            tool_calls=Count("tool_executions", distinct=True),
            failed_tools=Count(
                "tool_executions",
                filter=Q(tool_executions__status__in=FAILED_EXECUTION_STATUSES),
                distinct=True,
            ),
            failed_model_calls=Count(
                "model_call_rows",
                filter=Q(model_call_rows__status=CallStatus.FAILED),
                distinct=True,
            ),
        )
        .order_by("-created_at", "-id")
    )
    if status in RunStatus.values:
        runs = runs.filter(status=status)
    return Paginator(runs, RUNS_PER_PAGE).get_page(page)


def run_failures(run: Run) -> int:
    """The failures `audit_run_page` counted for this run."""
    return int(getattr(run, "failed_tools", 0)) + int(getattr(run, "failed_model_calls", 0))


def percentile(values: Iterable[int | None], pct: float) -> int | None:
    """The nearest-rank percentile of the values that are not None; None when there are none."""
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return None
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class LatencySummary:
    """p50 and p95 of run latency over a set of runs, and how many runs had one."""

    count: int
    p50_ms: int | None
    p95_ms: int | None
    max_ms: int | None


def latency_summary(runs: Sequence[Run]) -> LatencySummary:
    """Latency figures over the given runs (finished runs only have a latency)."""
    values = [run.latency_ms for run in runs if run.latency_ms is not None]
    return LatencySummary(
        count=len(values),
        p50_ms=percentile(values, 50),
        p95_ms=percentile(values, 95),
        max_ms=max(values) if values else None,
    )


def audit_run_get(*, run_id: uuid.UUID | str) -> Run:
    """Any run with its messages, model calls and tool executions prefetched (four queries).

    The prefetched lists are in order: messages by position, model calls and
    tool executions by step, then by start. RunNotFound for a missing run.
    """
    try:
        return (
            Run.objects.select_related("conversation__owner")
            .prefetch_related(
                Prefetch("messages", queryset=Message.objects.order_by("position")),
                Prefetch(
                    "model_call_rows",
                    queryset=ModelCall.objects.order_by("step", "started_at", "id"),
                ),
                Prefetch(
                    "tool_executions",
                    queryset=ToolExecution.objects.select_related("approved_by").order_by(
                        "step", "created_at", "tool_call_id"
                    ),
                ),
            )
            .get(pk=run_id)
        )
    except (Run.DoesNotExist, ValidationError, ValueError):
        raise RunNotFound("Run not found.") from None


@dataclass(frozen=True)
class StepTiming:
    """One line of a run's latency breakdown: a model call or a tool execution."""

    step: int
    kind: str  # "model" or "tool"
    label: str
    status: str
    duration_ms: int | None
    first_token_ms: int | None = None
    detail: str = ""
    failed: bool = False
    object_id: uuid.UUID | None = None


def run_latency_breakdown(run: Run) -> list[StepTiming]:
    """The run's model calls and tool executions in step order, with their timings.

    Within a step the model call comes first (it asked for the tools), then the
    tools in the order they were created. Reads `run.model_call_rows` and
    `run.tool_executions`, so prefetch them (audit_run_get does).
    """
    lines: list[tuple[tuple[int, int, int], StepTiming]] = []
    for index, call in enumerate(run.model_call_rows.all()):
        tokens = ""
        if call.prompt_tokens is not None or call.completion_tokens is not None:
            tokens = f"{call.prompt_tokens or 0} in / {call.completion_tokens or 0} out"
        lines.append(
            (
                (call.step, 0, index),
                StepTiming(
                    step=call.step,
                    kind="model",
                    label=f"{call.get_purpose_display()} · {call.model}",
                    status=call.status,
                    duration_ms=call.latency_ms,
                    first_token_ms=call.first_token_ms,
                    detail=tokens,
                    failed=call.status == CallStatus.FAILED,
                    object_id=call.pk,
                ),
            )
        )
    for index, execution in enumerate(run.tool_executions.all()):
        lines.append(
            (
                (execution.step, 1, index),
                StepTiming(
                    step=execution.step,
                    kind="tool",
                    label=execution.name,
                    status=execution.status,
                    duration_ms=execution.duration_ms,
                    detail="truncated" if execution.truncated else "",
                    failed=execution.status in FAILED_EXECUTION_STATUSES,
                    object_id=execution.pk,
                ),
            )
        )
    return [line for _, line in sorted(lines, key=lambda item: item[0])]


@dataclass
class TimelineEntry:
    """One message of a run, with the model call that wrote it or the audit row it reports."""

    message: Message
    model_call: ModelCall | None = None
    execution: ToolExecution | None = None


@dataclass
class RunTimeline:
    """What happened in a run, in order, as the audit page shows it."""

    entries: list[TimelineEntry]
    # Audit rows no tool message reports yet (pending, awaiting approval, or lost),
    # and model calls that wrote no message (failed ones): shown after the messages.
    unreported_executions: list[ToolExecution] = field(default_factory=list)
    unanswered_model_calls: list[ModelCall] = field(default_factory=list)


def run_timeline(run: Run) -> RunTimeline:
    """The run's messages in order, each joined to its model call or its tool execution.

    Pure Python over the rows `audit_run_get` prefetched: no query of its own.
    """
    calls_by_message = {
        call.response_message_id: call
        for call in run.model_call_rows.all()
        if call.response_message_id is not None
    }
    executions_by_call_id = {e.tool_call_id: e for e in run.tool_executions.all()}
    entries: list[TimelineEntry] = []
    reported: set[str] = set()
    answered: set[uuid.UUID] = set()
    for message in run.messages.all():
        entry = TimelineEntry(message=message)
        if message.role == Role.ASSISTANT:
            entry.model_call = calls_by_message.get(message.pk)
            if entry.model_call is not None:
                answered.add(entry.model_call.pk)
        elif message.role == Role.TOOL and message.tool_call_id:
            entry.execution = executions_by_call_id.get(message.tool_call_id)
            if entry.execution is not None:
                reported.add(entry.execution.tool_call_id)
        entries.append(entry)
    return RunTimeline(
        entries=entries,
        unreported_executions=[
            e for e in run.tool_executions.all() if e.tool_call_id not in reported
        ],
        unanswered_model_calls=[c for c in run.model_call_rows.all() if c.pk not in answered],
    )
