"""The per-tool, per-model and per-person tables, as cells: the page shows them and the CSV writes them.

One definition of each table (its columns and how a figure is written), so
the download holds exactly what the page shows. A cell is text, or None for
"no value" (the page shows —, the CSV leaves the cell empty). Durations are
in ms with at most one decimal (a percentile interpolates), rates in percent.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from chat.audit.figures import ModelRow, ToolRow
from chat.audit.people import PersonRow

T = TypeVar("T")
Cell = str | None

# A value a spreadsheet would run as a formula. Tool and model names come from
# models, so a CSV cell that starts like one is prefixed with ' (OWASP's advice).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def number(value: float | int | None) -> Cell:
    """12, 12.5, 1234: whole numbers bare, others with one decimal."""
    if value is None:
        return None
    rounded = round(float(value), 1)
    return f"{rounded:.0f}" if rounded.is_integer() else f"{rounded:.1f}"


def dollars(value: float | None) -> Cell:
    """0.0123: US dollars to four significant decimals; "no price" for none (never 0)."""
    if value is None:
        return "no price"
    return f"{value:.4f}" if value >= 0.01 else f"{value:.6f}"


def percent(part: int, whole: int) -> Cell:
    return number(100.0 * part / whole) if whole else None


@dataclass(frozen=True)
class Column(Generic[T]):
    key: str  # the CSV header
    label: str  # the page's header
    value: Callable[[T], Cell]
    numeric: bool = True
    title: str = ""


@dataclass(frozen=True)
class Table:
    columns: Sequence[Column[object]]
    rows: list[list[Cell]]

    @property
    def headers(self) -> list[str]:
        return [column.label for column in self.columns]


TOOL_COLUMNS: list[Column[ToolRow]] = [
    Column("tool", "Tool", lambda r: r.name, numeric=False),
    Column("calls", "Calls", lambda r: number(r.calls)),
    Column(
        "failed_pct",
        "Failed %",
        lambda r: percent(r.failed, r.calls),
        title="Failed, timed out or interrupted, of all calls",
    ),
    Column("timeouts", "Timeouts", lambda r: number(r.timeouts)),
    Column(
        "truncated",
        "Truncated",
        lambda r: number(r.truncated),
        title="Results the executor cut for the model",
    ),
    Column("p50_ms", "p50 ms", lambda r: number(r.p50_ms)),
    Column("p95_ms", "p95 ms", lambda r: number(r.p95_ms)),
    Column("max_ms", "Max ms", lambda r: number(r.max_ms)),
]

# What was decided of each tool's calls: a table (and a CSV) of its own.
DECISION_COLUMNS: list[Column[ToolRow]] = [
    Column("tool", "Tool", lambda r: r.name, numeric=False),
    Column("allowed", "Allowed", lambda r: number(r.allowed), title="Ran without asking"),
    Column("asked", "Asked", lambda r: number(r.asked), title="Waited for the owner's decision"),
    Column("approved", "Approved", lambda r: number(r.approved)),
    Column("rejected", "Rejected", lambda r: number(r.rejected)),
    Column(
        "expired",
        "Expired",
        lambda r: number(r.expired),
        title="Rejected after TOOL_APPROVAL_TIMEOUT_S with no decision",
    ),
    Column(
        "denied", "Denied", lambda r: number(r.denied), title="Refused by a tool policy; never ran"
    ),
]

MODEL_COLUMNS: list[Column[ModelRow]] = [
    Column("model", "Model", lambda r: r.model, numeric=False),
    Column("calls", "Calls", lambda r: number(r.calls)),
    Column("failed_pct", "Failed %", lambda r: percent(r.failed, r.calls)),
    Column("p50_ms", "p50 ms", lambda r: number(r.p50_ms), title="Latency, to the last chunk"),
    Column("p95_ms", "p95 ms", lambda r: number(r.p95_ms), title="Latency, to the last chunk"),
    Column(
        "p50_first_token_ms",
        "p50 TTFT ms",
        lambda r: number(r.p50_first_token_ms),
        title="Time to first token",
    ),
    Column(
        "p95_first_token_ms",
        "p95 TTFT ms",
        lambda r: number(r.p95_first_token_ms),
        title="Time to first token",
    ),
    Column("prompt_tokens", "Tokens in", lambda r: number(r.prompt_tokens)),
    Column("completion_tokens", "Tokens out", lambda r: number(r.completion_tokens)),
    Column(
        "cost_usd",
        "Cost $",
        lambda r: dollars(r.cost_usd),
        title="From the providers file's prices; no price: the model has none (docs/governance.md)",
    ),
]


# What each person used: the budgets count the same calls (docs/governance.md).
PERSON_COLUMNS: list[Column[PersonRow]] = [
    Column("user", "Person", lambda r: r.username, numeric=False),
    Column("runs", "Runs", lambda r: number(r.runs)),
    Column("model_calls", "Model calls", lambda r: number(r.calls)),
    Column("prompt_tokens", "Tokens in", lambda r: number(r.prompt_tokens)),
    Column("completion_tokens", "Tokens out", lambda r: number(r.completion_tokens)),
    Column(
        "cost_usd",
        "Cost $",
        lambda r: dollars(r.cost_usd),
        title="Of the calls whose model has a price; no price: none had one",
    ),
]


def _table(columns: Sequence[Column[T]], rows: Sequence[T]) -> Table:
    return Table(
        columns=columns,  # type: ignore[arg-type]
        rows=[[column.value(row) for column in columns] for row in rows],
    )


def tool_table(rows: Sequence[ToolRow]) -> Table:
    return _table(TOOL_COLUMNS, rows)


def decision_table(rows: Sequence[ToolRow]) -> Table:
    return _table(DECISION_COLUMNS, rows)


def model_table(rows: Sequence[ModelRow]) -> Table:
    return _table(MODEL_COLUMNS, rows)


def person_table(rows: Sequence[PersonRow]) -> Table:
    return _table(PERSON_COLUMNS, rows)


def _csv_safe(cell: Cell) -> str:
    if cell is None:
        return ""
    return f"'{cell}" if cell.startswith(FORMULA_STARTS) else cell


def table_csv(table: Table) -> str:
    """The table as CSV text: a header row of column keys, then the cells."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow([column.key for column in table.columns])
    for row in table.rows:
        writer.writerow([_csv_safe(cell) for cell in row])
    return out.getvalue()
