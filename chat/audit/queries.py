"""Reads for the staff audit pages and the admin: runs with their latency, and a run's timeline.

Staff see every user's runs here, so unlike chat/selectors.py these reads take
no user: the views that call them are the ones that check `is_staff`. Each
read costs a fixed number of queries whatever the size of the run or the page.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.core.paginator import Page, Paginator
from django.db.models import (
    BooleanField,
    Count,
    Exists,
    ExpressionWrapper,
    IntegerField,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
)
from django.db.models.functions import Coalesce, Substr

from chat.audit.formatting import QUESTION_CHARS, figure_text
from chat.audit.period import Period
from chat.exceptions import ConversationNotFound, RunNotFound
from chat.models import (
    CallStatus,
    Conversation,
    ExecutionStatus,
    Message,
    ModelCall,
    Role,
    Run,
    RunStatus,
    ToolExecution,
    model_step_count,
)

RUNS_PER_PAGE = 50

# A tool call that did not give the model a real result: what an auditor looks for first.
FAILED_EXECUTION_STATUSES = (
    ExecutionStatus.FAILED,
    ExecutionStatus.TIMED_OUT,
    ExecutionStatus.INTERRUPTED,
)


def _count(model: type[ToolExecution] | type[ModelCall], **conditions: Any) -> Coalesce:
    """A correlated COUNT of the run's rows: computed for the page's rows only, no join."""
    counted = (
        model.objects.filter(run_id=OuterRef("pk"), **conditions)
        .order_by()
        .values("run_id")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


# The overview's choice of runs by whether they are replays (docs/replay.md); "" all.
REPLAY_FILTERS = {"no": "Not replays", "only": "Replays only"}


def audit_runs(
    *,
    status: str = "",
    period: Period | None = None,
    conversation_id: uuid.UUID | None = None,
    replays: str = "",
) -> QuerySet[Run]:
    """Runs, newest first, each with the start of its user's message and its counts.

    Annotated: `question` (the first QUESTION_CHARS of the message that began
    the run), `tool_calls`, `failed_tools`, `failed_model_calls`, `model_steps`,
    `model_call_count`, and `replaced_by_regenerate` (a later run answered the same
    question again) or else `replaced_by_edit` (its question was edited and resent): its
    messages are superseded, kept for the record. The counts are correlated subqueries, so a page of
    runs costs one query whatever the runs hold, and counting the runs costs
    none of them. An unknown `status` is ignored; `replays` ("no", "only", "" for
    all) keeps the runs that are not replays, or only those.
    """
    runs: QuerySet[Run] = (
        Run.objects.select_related("conversation__owner")
        .annotate(
            question=Substr("trigger_message__content", 1, QUESTION_CHARS),
            tool_calls=_count(ToolExecution),
            failed_tools=_count(ToolExecution, status__in=FAILED_EXECUTION_STATUSES),
            failed_model_calls=_count(ModelCall, status=CallStatus.FAILED),
            model_call_count=_count(ModelCall),
            model_steps=model_step_count(),
            replaced_by_regenerate=_answered_again(),
            # A run answered again was replaced by that regenerate, even when a
            # later edit superseded the question they share.
            replaced_by_edit=ExpressionWrapper(
                Q(trigger_message__superseded_at__isnull=False) & ~_answered_again(),
                output_field=BooleanField(),
            ),
        )
        .order_by("-created_at", "-id")
    )
    if status in RunStatus.values:
        runs = runs.filter(status=status)
    if period is not None:
        runs = runs.filter(created_at__gte=period.start, created_at__lt=period.end)
    if conversation_id is not None:
        runs = runs.filter(conversation_id=conversation_id)
    if replays in REPLAY_FILTERS:
        runs = runs.filter(replay_of__isnull=replays == "no")
    return runs


def _answered_again() -> Exists:
    """Whether a later run answered the same message (a regenerate)."""
    return Exists(
        Run.objects.filter(
            trigger_message_id=OuterRef("trigger_message_id"),
            created_at__gt=OuterRef("created_at"),
        )
    )


def audit_run_page(
    *,
    page: int | str | None = 1,
    status: str = "",
    period: Period | None = None,
    conversation_id: uuid.UUID | None = None,
    oldest_first: bool = False,
    replays: str = "",
) -> Page[Run]:
    """A page of `audit_runs` (two queries: the count and the page)."""
    runs = audit_runs(
        status=status, period=period, conversation_id=conversation_id, replays=replays
    )
    if oldest_first:
        runs = runs.order_by("created_at", "id")
    return Paginator(runs, RUNS_PER_PAGE).get_page(page)


def run_failures(run: Run) -> int:
    """The failures `audit_runs` counted for this run: failed tool calls and model calls."""
    return int(getattr(run, "failed_tools", 0)) + int(getattr(run, "failed_model_calls", 0))


def audit_conversation_get(*, conversation_id: uuid.UUID | str) -> Conversation:
    """Any conversation with its owner (one query). ConversationNotFound for a missing one."""
    try:
        return Conversation.objects.select_related("owner").get(pk=conversation_id)
    except (Conversation.DoesNotExist, ValidationError, ValueError):
        raise ConversationNotFound("Conversation not found.") from None


def run_calls_prefetch() -> tuple[Prefetch[Any], Prefetch[Any]]:
    """A run's model calls and tool executions, in the order the breakdown and waterfall read."""
    return (
        Prefetch(
            "model_call_rows", queryset=ModelCall.objects.order_by("step", "started_at", "id")
        ),
        Prefetch(
            "tool_executions",
            queryset=ToolExecution.objects.select_related("approved_by").order_by(
                "step", "created_at", "tool_call_id"
            ),
        ),
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
                *run_calls_prefetch(),
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
            tokens = f"{_tokens(call.prompt_tokens)} in / {_tokens(call.completion_tokens)} out"
        elif call.status == CallStatus.SUCCEEDED:
            tokens = "tokens not reported"  # the server sent no usage: stored as NULL, not 0
        if call.note:
            tokens = f"{tokens} · {call.note}" if tokens else call.note
        lines.append(
            (
                (call.step, 0, index),
                StepTiming(
                    step=call.step,
                    kind="model",
                    label=f"{call.get_purpose_display()} · {call.provider_model}",
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


def _tokens(tokens: int | None) -> str:
    return "not reported" if tokens is None else figure_text(tokens)
