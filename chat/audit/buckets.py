"""Bucketing done by the database: latency histogram bins and runs-over-time bins.

The histogram's bins are fixed and roughly logarithmic (the 1-2.5-5 steps
that latency dashboards use), so a 40 ms run and a 40 s run both land in a
bin that says something. Time bins are as wide as the first of a list of
round widths that cuts the period into at most `MAX_TIME_BINS`. Either way
the bin of a row is an expression (a CASE, or an integer division of epoch
seconds), grouped by in SQL: the rows never come to Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import NotSupportedError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Case, Func, IntegerField, Value, When
from django.db.models.sql.compiler import SQLCompiler

# The upper edges of the latency bins in ms; a last, open bin holds the rest.
LATENCY_EDGES_MS = (50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000)

# Time bin widths in seconds, the first that fits wins.
TIME_BIN_WIDTHS_S = (
    60,
    5 * 60,
    10 * 60,
    15 * 60,
    30 * 60,
    3600,
    3 * 3600,
    6 * 3600,
    12 * 3600,
    86400,
    2 * 86400,
    7 * 86400,
    14 * 86400,
    30 * 86400,
)
MAX_TIME_BINS = 60
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def short_duration(ms: float) -> str:
    """A duration as an axis says it: 250ms, 2.5s, 1m."""
    if ms < 1000:
        return f"{ms:g}ms"
    if ms < 60_000:
        return f"{ms / 1000:g}s"
    return f"{ms / 60_000:g}m"


@dataclass(frozen=True)
class LatencyBin:
    """One bin of the latency histogram: [low_ms, high_ms), high None for the open last one."""

    index: int
    low_ms: int
    high_ms: int | None

    @property
    def label(self) -> str:
        if self.high_ms is None:
            return f"≥ {short_duration(self.low_ms)}"
        return f"{short_duration(self.low_ms)} to {short_duration(self.high_ms)}"


LATENCY_BINS = tuple(
    LatencyBin(index, low, high)
    for index, (low, high) in enumerate(
        zip((0, *LATENCY_EDGES_MS), (*LATENCY_EDGES_MS, None), strict=True)
    )
)


def latency_bin(field: str) -> Case:
    """The index of the LATENCY_BINS bin a row's `field` falls in (NULL stays NULL)."""
    return Case(
        *[
            When(**{f"{field}__lt": edge}, then=Value(index))
            for index, edge in enumerate(LATENCY_EDGES_MS)
        ],
        When(**{f"{field}__isnull": False}, then=Value(len(LATENCY_EDGES_MS))),
        default=None,
        output_field=IntegerField(),
    )


def time_bin_width(span_s: float) -> int:
    """The first round width that cuts a span of `span_s` seconds into at most MAX_TIME_BINS."""
    for width in TIME_BIN_WIDTHS_S:
        if span_s / width <= MAX_TIME_BINS:
            return width
    return TIME_BIN_WIDTHS_S[-1]


class TimeBin(Func):
    """floor((`expression` - `start`) / width_s), in seconds: the time bin a row falls in.

    Computed exactly, so a row at a bin's very edge lands in that bin: whole
    seconds and microseconds are subtracted apart (a double holding epoch
    seconds has no room left for microseconds).
    """

    output_field = IntegerField()

    def __init__(self, expression: Any, *, start: datetime, width_s: int) -> None:
        super().__init__(expression)
        # Numbers of ours, written into the SQL as literals (so the GROUP BY and the SELECT
        # are the same text); nothing from a request reaches them unparsed.
        since_epoch = start - EPOCH
        self.start_s = since_epoch.days * 86400 + since_epoch.seconds
        self.start_us = since_epoch.microseconds
        self.width_s = int(width_s)

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, Any]:
        sql, params = compiler.compile(self.source_expressions[0])
        # EXTRACT(EPOCH ...) is a numeric with the microseconds: exact decimal arithmetic.
        start = f"{self.start_s}.{self.start_us:06d}"
        return f"FLOOR((EXTRACT(EPOCH FROM {sql}) - {start}) / {self.width_s})::integer", params

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, Any]:
        sql, params = compiler.compile(self.source_expressions[0])
        # Django stores "YYYY-MM-DD HH:MM:SS[.ffffff]" in UTC: the whole seconds from the
        # julian day of the first 19 characters (rounded: a double holds them exactly), the
        # fraction from the text after them. Rows are at or after `start`, so truncation
        # toward zero is floor. (No strftime('%s'): a % would be taken for a parameter.)
        whole = f"ROUND((julianday(substr({sql}, 1, 19)) - 2440587.5) * 86400.0)"
        seconds = f"(CAST({whole} AS INTEGER) - {self.start_s})"
        fraction = f"(COALESCE(CAST(substr({sql}, 20) AS REAL), 0.0) - {self.start_us / 1e6!r})"
        return f"CAST(({seconds} + {fraction}) / {self.width_s} AS INTEGER)", (
            *params,
            *params,
        )  # `sql` is in it twice

    def as_sql(
        self,
        compiler: SQLCompiler,
        connection: BaseDatabaseWrapper,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra_context: Any,
    ) -> tuple[str, Any]:
        raise NotSupportedError(f"TimeBin has no SQL for {connection.vendor}")
