"""A run's waterfall: its model calls and tool executions on one time axis.

Time 0 is when the run was created (the user's message was stored), the end
is when it finished. A first row sums the run up: the wait in the queue, the
time in model calls and in tools, the time a call waited for a person's
decision (from its row's `created_at` to its `decided_at`, to its run's end
when a cancel came first, or to now while it waits: that is people's time, not
toolchat's), and the gaps between them,
which are toolchat's own overhead (storing each step, events, dispatch). Then one row
per model call, with a mark at its first token, and one row per tool
execution, so calls that ran in parallel sit on parallel rows.

Geometry is in percent of the width, so the server-rendered SVG stretches to
any screen while its text keeps its size (templates/audit/_waterfall.html).
Pure Python over the rows `audit_run_get` prefetched: no query of its own.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from chat.audit.formatting import figure_text
from chat.audit.queries import FAILED_EXECUTION_STATUSES
from chat.audit.timeline import Tick, clip, length, max_parallel, pct, ticks, union
from chat.models import CallStatus, ExecutionStatus, ModelCall, Run, ToolExecution

LABEL_CHARS = 36
INSTANT_PCT = 0.4
# Rows: the summary, then the bars; each row has a line of text above its bar.
AXIS_HEIGHT = 22
ROW_HEIGHT = 36
BAR_OFFSET = 17
BAR_HEIGHT = 14


def _ms_between(start: datetime, end: datetime) -> float:
    return (end - start).total_seconds() * 1000.0


def duration_text(ms: float | None) -> str:
    """12 ms, 1,234 ms: how the pages write a duration."""
    if ms is None:
        return "—"
    return f"{figure_text(ms)} ms"


@dataclass(frozen=True)
class Bar:
    """One model call or tool execution on the axis (geometry in percent, y in px)."""

    kind: str  # "model" or "tool"
    label: str
    title: str  # the tooltip: everything the row knows
    status: str
    failed: bool
    step: int
    start_ms: float
    duration_ms: float | None
    first_token_ms: float | None
    x_pct: float
    width_pct: float
    first_token_pct: float | None
    y: int
    object_id: uuid.UUID

    @property
    def end_pct(self) -> float:
        return self.x_pct + self.width_pct

    @property
    def instant(self) -> bool:
        """Too short to see as a bar: drawn with a mark as well."""
        return self.width_pct < INSTANT_PCT

    @property
    def label_anchor(self) -> str:
        """Text starts at the bar, or ends at it when the bar is in the right half."""
        return "start" if self.x_pct < 50 else "end"

    @property
    def label_x_pct(self) -> float:
        return self.x_pct if self.label_anchor == "start" else self.end_pct

    @property
    def text_y(self) -> int:
        return self.y + 12

    @property
    def bar_y(self) -> int:
        return self.y + BAR_OFFSET


@dataclass(frozen=True)
class Segment:
    """A stretch of the summary row: queue, model, tool or overhead."""

    kind: str
    start_ms: float
    end_ms: float
    x_pct: float
    width_pct: float

    @property
    def title(self) -> str:
        names = {
            "queue": "queued",
            "model": "model",
            "tool": "tools",
            "approval": "waiting for a person",
            "overhead": "toolchat",
        }
        return f"{names[self.kind]}: {duration_text(self.end_ms - self.start_ms)}"


@dataclass(frozen=True)
class Waterfall:
    total_ms: float  # the axis: the run's span, or its last call's end if later
    shown_total_ms: int  # the total the page writes: the run's latency_ms once it has one
    queue_ms: float
    model_ms: float  # the model calls' latency, summed (they never overlap)
    tool_ms: float  # wall time with at least one tool running
    tool_work_ms: float  # the tools' durations, summed (more than tool_ms when parallel)
    approval_ms: float  # a call waited for a person's decision, and nothing else went on
    overhead_ms: float  # neither queued, nor in a model call or a tool, nor waiting for a person
    max_parallel: int
    segments: list[Segment]
    bars: list[Bar]
    untimed: list[str]  # calls with no time to draw (not started), named
    ticks: list[Tick]
    height: int
    summary_y: int

    @property
    def summary_bar_y(self) -> int:
        return self.summary_y + BAR_OFFSET

    @property
    def summary_text_y(self) -> int:
        return self.summary_y + 12


@dataclass(frozen=True)
class _Span:
    kind: str
    start: float
    end: float


@dataclass(frozen=True)
class _Item:
    """A model call or a tool execution placed on the axis, before geometry."""

    kind: str
    label: str
    details: str
    status: str
    failed: bool
    step: int
    start: float
    duration: float | None
    first_token: float | None
    object_id: uuid.UUID

    @property
    def end(self) -> float:
        return self.start + (self.duration or 0.0)


def _model_item(call: ModelCall, origin: datetime) -> _Item:
    details = [f"step {call.step}", call.status]
    if call.first_token_ms is not None:
        details.append(f"first token {duration_text(call.first_token_ms)}")
    if call.prompt_tokens is not None or call.completion_tokens is not None:
        tokens = (figure_text(call.prompt_tokens or 0), figure_text(call.completion_tokens or 0))
        details.append(f"{tokens[0]} → {tokens[1]} tokens")
    if call.attempts > 1:
        details.append(f"{call.attempts} attempts")
    return _Item(
        kind="model",
        label=f"{call.get_purpose_display()} · {call.provider_model}",
        details=", ".join(details),
        status=call.status,
        failed=call.status == CallStatus.FAILED,
        step=call.step,
        start=max(0.0, _ms_between(origin, call.started_at)),
        duration=None if call.latency_ms is None else float(call.latency_ms),
        first_token=None if call.first_token_ms is None else float(call.first_token_ms),
        object_id=call.pk,
    )


def _tool_item(execution: ToolExecution, origin: datetime, started_at: datetime) -> _Item:
    duration: float | None = None
    if execution.duration_ms is not None:
        duration = float(execution.duration_ms)
    elif execution.finished_at is not None:
        duration = max(0.0, _ms_between(started_at, execution.finished_at))
    details = [f"step {execution.step}", execution.status]
    if execution.truncated:
        details.append("truncated")
    if execution.attempts > 1:
        details.append(f"{execution.attempts} attempts")
    return _Item(
        kind="tool",
        label=execution.name,
        details=", ".join(details),
        status=execution.status,
        failed=execution.status in FAILED_EXECUTION_STATUSES,
        step=execution.step,
        start=max(0.0, _ms_between(origin, started_at)),
        duration=duration,
        first_token=None,
        object_id=execution.pk,
    )


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def _bar(item: _Item, total: float, y: int) -> Bar:
    first_pct = None
    if item.first_token is not None and item.duration:
        first_pct = pct(item.start + min(item.first_token, item.duration), total)
    return Bar(
        kind=item.kind,
        label=f"{_short(item.label)} · {duration_text(item.duration)}",
        title=(
            f"{item.label}: {duration_text(item.duration)}, "
            f"from {duration_text(item.start)} ({item.details})"
        ),
        status=item.status,
        failed=item.failed,
        step=item.step,
        start_ms=item.start,
        duration_ms=item.duration,
        first_token_ms=item.first_token,
        x_pct=pct(item.start, total),
        width_pct=pct(item.duration or 0.0, total),
        first_token_pct=first_pct,
        y=y,
        object_id=item.object_id,
    )


def _shown_total(run: Run, total: float) -> int:
    """The run's latency as stored, so that the waterfall and the run's header agree.

    The axis is a float from the rows' times; rounded on its own it came out 1 ms
    above Run.latency_ms (474 against 473), which the run's end cuts to whole
    milliseconds. A run still going has no latency: its axis, cut the same way.
    """
    return run.latency_ms if run.latency_ms is not None else int(total)


def _approval_spans(run: Run, executions: list[ToolExecution]) -> list[tuple[float, float]]:
    """When calls waited for a person: stored to decided, or to the run's end (or now).

    A call its run's end answered while it waited (a cancel) waited until that end.
    """
    origin = run.created_at
    until = run.finished_at or timezone.now()
    spans = []
    for execution in executions:
        if execution.decided_at is not None:
            decided = execution.decided_at
        elif execution.status == ExecutionStatus.AWAITING_APPROVAL:
            decided = until
        elif (ended := execution.undecided_wait_end) is not None:
            decided = min(ended, until)  # it waited until its run's end (a cancel)
        else:
            continue
        start = max(0.0, _ms_between(origin, execution.created_at))
        spans.append((start, max(start, _ms_between(origin, decided))))
    return spans


def _run_end_ms(run: Run, ends: list[float]) -> float:
    """Where the run's figures stop: its end, or the last thing drawn if later (or going)."""
    if run.finished_at is not None:
        return max([_ms_between(run.created_at, run.finished_at), *ends])
    return max([0.0, *ends])


def run_waterfall(run: Run, *, axis_ms: float = 0.0) -> Waterfall:
    """The waterfall of a run whose model calls and tool executions are prefetched.

    `axis_ms` stretches its time axis to at least that long: two runs drawn on
    one page (a comparison) share a scale.
    """
    origin = run.created_at
    items = [_model_item(call, origin) for call in run.model_call_rows.all()]
    untimed: list[str] = []
    executions = list(run.tool_executions.all())
    for execution in executions:
        if execution.started_at is None:
            untimed.append(f"{execution.name} ({execution.get_status_display().lower()})")
        else:
            items.append(_tool_item(execution, origin, execution.started_at))
    items.sort(key=lambda item: (item.start, item.kind != "model"))
    waits = _approval_spans(run, executions)

    total = _run_end_ms(run, [item.end for item in items] + [end for _, end in waits])
    scale = max(total, axis_ms)  # what the axis spans; the figures stop at the run's end
    queue_ms = (
        min(max(0.0, _ms_between(origin, run.started_at)), total) if run.started_at else total
    )
    first_row = AXIS_HEIGHT + ROW_HEIGHT  # below the axis and the summary row
    bars = [_bar(item, scale, first_row + i * ROW_HEIGHT) for i, item in enumerate(items)]

    model_spans = [(item.start, item.end) for item in items if item.kind == "model"]
    tool_spans = [(item.start, item.end) for item in items if item.kind == "tool"]
    tool_union = union(tool_spans)
    segments = _segments(total, queue_ms, union(model_spans), tool_union, union(waits), scale=scale)
    approval_ms = sum(seg.end_ms - seg.start_ms for seg in segments if seg.kind == "approval")
    overhead_ms = sum(seg.end_ms - seg.start_ms for seg in segments if seg.kind == "overhead")
    return Waterfall(
        total_ms=total,
        shown_total_ms=_shown_total(run, total),
        queue_ms=queue_ms,
        model_ms=sum(end - start for start, end in model_spans),
        tool_ms=length(tool_union),
        tool_work_ms=sum(end - start for start, end in tool_spans),
        approval_ms=approval_ms,
        overhead_ms=overhead_ms,
        max_parallel=max_parallel(tool_spans),
        segments=segments,
        bars=bars,
        untimed=untimed,
        ticks=ticks(scale),
        height=first_row + len(bars) * ROW_HEIGHT + 4,
        summary_y=AXIS_HEIGHT,
    )


def _minus(spans: list[tuple[float, float]], taken: list[_Span]) -> list[tuple[float, float]]:
    """The parts of `spans` outside every span already `taken`."""
    pieces = list(spans)
    for m in taken:
        pieces = [
            piece
            for ps, pe in pieces
            for piece in ((ps, min(pe, m.start)), (max(ps, m.end), pe))
            if piece[1] > piece[0]
        ]
    return pieces


def _segments(
    total: float,
    queue_ms: float,
    model_spans: list[tuple[float, float]],
    tool_spans: list[tuple[float, float]],
    approval_spans: list[tuple[float, float]],
    *,
    scale: float,
) -> list[Segment]:
    """The summary row: queue, then model, tool, approval and overhead stretches to the end.

    Placed on an axis `scale` long (the run's `total`, or more in a comparison).
    """
    marks: list[_Span] = []
    if queue_ms > 0:
        marks.append(_Span("queue", 0.0, queue_ms))
    # Model calls and tools do not overlap in a run (a step's tools wait for its call);
    # should clocks disagree, the model call wins the overlap. A call that needs no
    # approval may run while another of its step waits for a person: the tool wins.
    work = [_Span("model", s, e) for s, e in clip(model_spans, queue_ms, total)]
    for kind, spans in (("tool", tool_spans), ("approval", approval_spans)):
        pieces = _minus(clip(spans, queue_ms, total), work)
        work.extend(_Span(kind, ps, pe) for ps, pe in pieces)
    work.sort(key=lambda span: span.start)
    cursor = queue_ms
    for span in work:
        if span.start > cursor:
            marks.append(_Span("overhead", cursor, span.start))
        marks.append(span)
        cursor = max(cursor, span.end)
    if total > cursor:
        marks.append(_Span("overhead", cursor, total))
    return [
        Segment(
            kind=m.kind,
            start_ms=m.start,
            end_ms=m.end,
            x_pct=pct(m.start, scale),
            width_pct=pct(m.end - m.start, scale),
        )
        for m in marks
        if m.end > m.start
    ]
