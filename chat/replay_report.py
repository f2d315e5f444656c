"""The report of many replays (`manage.py replay`): per run and model, then totals per model.

Each row compares one replay with its original (chat/comparison.py): whether
the same tools were called with equal arguments (in a forced replay, how many
of the original's steps agree), how alike the answers are, and the replay's
latency and tokens as ratios of the original's (2.0: twice as slow, twice
the tokens). The latencies compared are toolchat's, as the statistics count
them (`Run.own_latency_ms`): a run's wait for a person to decide on a call
is people's time, left out of both. The totals per model count the replays and their outcomes and
summarize the ratios by their median, which one pathological run does not
move. The report is a text table for the terminal and CSV for a spreadsheet.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import statistics
import uuid
from collections.abc import Iterable, Mapping

from chat.comparison import RunRecord, comparison
from chat.models import ReplayMode, Run


@dataclasses.dataclass(frozen=True)
class ReportRow:
    """One replay against its original."""

    run_id: str
    replay_id: str
    model: str
    mode: str  # free or forced
    status: str  # the replay's
    same_tool_calls: bool
    steps_same: int | None  # forced: the original's steps the model agreed with
    steps: int | None  # forced: the original's steps with tool calls in either run
    answer_similarity: float | None
    latency_ratio: float | None
    token_ratio: float | None
    error: str = ""  # why the replay failed, in its run's own words ("" when it did not)


@dataclasses.dataclass(frozen=True)
class ModelTotals:
    """One model's replays, summed up."""

    model: str
    replays: int
    completed: int
    same_tool_calls: int
    steps_same: int
    steps: int
    answer_similarity: float | None  # mean
    latency_ratio: float | None  # median
    token_ratio: float | None  # median


def report_row(
    original: Run,
    replica: Run,
    *,
    model: str,
    records: Mapping[uuid.UUID, RunRecord] | None = None,
) -> ReportRow:
    """Compare one replay with its original (from `records`, when read already)."""
    compared = comparison(original, replica, records=records)
    mine, theirs = compared["runs"]
    forced = replica.replay_mode == ReplayMode.FORCED
    steps = compared["steps"]
    return ReportRow(
        run_id=str(original.pk),
        replay_id=str(replica.pk),
        model=model,
        mode=replica.replay_mode,
        status=replica.status,
        same_tool_calls=compared["same_tool_calls"],
        steps_same=sum(1 for step in steps if step["same"]) if forced else None,
        steps=len(steps) if forced else None,
        answer_similarity=compared["answer_similarity"],
        latency_ratio=_ratio(replica.own_latency_ms, original.own_latency_ms),
        token_ratio=_ratio(_tokens(theirs), _tokens(mine)),
        error=replica.error or "",
    )


def _tokens(side: dict[str, int | None]) -> int | None:
    if side["prompt_tokens"] is None and side["completion_tokens"] is None:
        return None  # not reported: no ratio, rather than a wrong one
    return (side["prompt_tokens"] or 0) + (side["completion_tokens"] or 0)


def _ratio(value: int | None, base: int | None) -> float | None:
    if value is None or not base:
        return None
    return round(value / base, 3)


def report_totals(rows: Iterable[ReportRow]) -> list[ModelTotals]:
    """The totals per model, in the order the models first appear."""
    by_model: dict[str, list[ReportRow]] = {}
    for row in rows:
        by_model.setdefault(row.model, []).append(row)
    return [_totals(model, mine) for model, mine in by_model.items()]


def _totals(model: str, rows: list[ReportRow]) -> ModelTotals:
    similarities = [r.answer_similarity for r in rows if r.answer_similarity is not None]
    latencies = [r.latency_ratio for r in rows if r.latency_ratio is not None]
    tokens = [r.token_ratio for r in rows if r.token_ratio is not None]
    return ModelTotals(
        model=model,
        replays=len(rows),
        completed=sum(1 for r in rows if r.status == "completed"),
        same_tool_calls=sum(1 for r in rows if r.same_tool_calls),
        steps_same=sum(r.steps_same or 0 for r in rows),
        steps=sum(r.steps or 0 for r in rows),
        answer_similarity=round(statistics.fmean(similarities), 3) if similarities else None,
        latency_ratio=round(statistics.median(latencies), 3) if latencies else None,
        token_ratio=round(statistics.median(tokens), 3) if tokens else None,
    )


_FIELDS = [field.name for field in dataclasses.fields(ReportRow)]


def report_csv(rows: Iterable[ReportRow]) -> str:
    """The rows as CSV, one line per replay, with a header."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(_FIELDS)
    for row in rows:
        writer.writerow(["" if value is None else value for value in dataclasses.astuple(row)])
    return out.getvalue()


def report_table(rows: list[ReportRow], totals: list[ModelTotals]) -> str:
    """The report for a terminal: one line per replay, then the totals per model."""
    lines = [
        _line(
            ["run", "model", "status", "same tools", "similarity", "latency ratio", "tokens ratio"]
        ),
    ]
    for row in rows:
        same = "yes" if row.same_tool_calls else "no"
        if row.steps is not None:
            same = f"{row.steps_same}/{row.steps} steps"
        lines.append(
            _line(
                [
                    row.run_id[:8],
                    row.model,
                    row.status,
                    same,
                    _number(row.answer_similarity),
                    _number(row.latency_ratio),
                    _number(row.token_ratio),
                ]
            )
        )
        if row.error:
            lines.append(f"  {row.error}")  # why it failed, under its line
    lines.append("")
    lines.append(
        _line(
            [
                "model",
                "replays",
                "completed",
                "same tools",
                "similarity",
                "latency ratio",
                "tokens ratio",
            ],
            _MODEL_WIDTHS,
        )
    )
    for total in totals:
        same = f"{total.same_tool_calls}/{total.replays}"
        if total.steps:
            same += f" ({total.steps_same}/{total.steps} steps)"
        lines.append(
            _line(
                [
                    total.model,
                    str(total.replays),
                    str(total.completed),
                    same,
                    _number(total.answer_similarity),
                    _number(total.latency_ratio),
                    _number(total.token_ratio),
                ],
                _MODEL_WIDTHS,
            )
        )
    return "\n".join(lines) + "\n"


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


_RUN_WIDTHS = (9, 24, 10, 22, 10, 13, 12)
_MODEL_WIDTHS = (24, 8, 10, 22, 10, 13, 12)


def _line(cells: list[str], widths: tuple[int, ...] = _RUN_WIDTHS) -> str:
    return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()
