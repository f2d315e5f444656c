"""Percentiles computed in the database, the same on PostgreSQL and on SQLite.

The figure is PostgreSQL's `percentile_cont(f)`: sort the values (NULLs left
out), take the position h = (n - 1) * f counted from 0, and interpolate
linearly between the values at floor(h) and ceil(h). On PostgreSQL it is the
ordered-set aggregate itself (`PercentileCont`), so it sits in the same GROUP BY
query as the counts. SQLite has no such function: there one query per measured
column ranks the values of every group with window functions (ROW_NUMBER and
COUNT over the group) and returns only the rows next to each h, at most two
per group and fraction, which Python then interpolates. So the query count
does not grow with the data either way, and neither does what is sent back.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import NotSupportedError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Aggregate, Count, F, FloatField, QuerySet, Value, Window
from django.db.models.functions import RowNumber
from django.db.models.sql.compiler import SQLCompiler

Row = dict[str, Any]


class PercentileCont(Aggregate):
    """PostgreSQL's `percentile_cont(fraction) WITHIN GROUP (ORDER BY expression)`."""

    function = "PERCENTILE_CONT"
    name = "PercentileCont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: str | Any, fraction: float, **extra: Any) -> None:
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"a percentile's fraction is between 0 and 1, not {fraction!r}")
        # A float of ours, written into the SQL as a literal: nothing from a request gets here.
        super().__init__(expression, fraction=repr(float(fraction)), **extra)

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> Any:
        raise NotSupportedError("SQLite has no percentile_cont: use percentiles_by_group().")


def supports_percentile_cont(using: str = "default") -> bool:
    """Whether the database has the ordered-set aggregate (PostgreSQL does, SQLite does not)."""
    return connections[using].vendor == "postgresql"


def percentile_cont(values: Iterable[float | int | None], fraction: float) -> float | None:
    """percentile_cont of the values in Python (None left out): the reference the tests use."""
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return None
    return _interpolate(dict(enumerate(ordered, start=1)), len(ordered), fraction)


def _interpolate(ranked: Mapping[int, float], n: int, fraction: float) -> float:
    """The value at position (n - 1) * fraction, from the values by 1-based rank around it."""
    h = (n - 1) * fraction
    low, high = math.floor(h), math.ceil(h)
    below = float(ranked[low + 1])
    return below + (h - low) * (float(ranked[high + 1]) - below)


@dataclass(frozen=True)
class Percentile:
    """A percentile column of a grouped read: `fraction` of the values of `field`."""

    field: str
    fraction: float


def grouped_rows(
    queryset: QuerySet[Any],
    *,
    group: str | None,
    aggregates: Mapping[str, Any],
    percentiles: Mapping[str, Percentile],
    order_by: Sequence[str] = (),
    limit: int | None = None,
) -> list[Row]:
    """One row per value of `group` (one row in all when None), with aggregates and percentiles.

    PostgreSQL: one query. SQLite: one, plus one per distinct percentile field.
    """
    queryset = queryset.order_by()
    native = supports_percentile_cont(queryset.db)
    extra = (
        {name: PercentileCont(p.field, p.fraction) for name, p in percentiles.items()}
        if native
        else {}
    )
    if group is None:
        rows: list[Row] = [queryset.aggregate(**aggregates, **extra)]
    else:
        grouped = queryset.values(group).annotate(**aggregates, **extra).order_by(*order_by)
        rows = list(grouped[:limit] if limit is not None else grouped)
    if native or not percentiles or not rows:
        return rows
    if group is not None:
        queryset = queryset.filter(**{f"{group}__in": [row[group] for row in rows]})
    by_field: dict[str, dict[str, float]] = defaultdict(dict)
    for name, p in percentiles.items():
        by_field[p.field][name] = p.fraction
    for field, wanted in by_field.items():
        found = percentiles_by_group(
            queryset, group=group, field=field, fractions=sorted(set(wanted.values()))
        )
        for row in rows:
            figures = found.get(row[group] if group is not None else None, {})
            for name, fraction in wanted.items():
                row[name] = figures.get(fraction)
    return rows


def percentiles_by_group(
    queryset: QuerySet[Any], *, group: str | None, field: str, fractions: Sequence[float]
) -> dict[Hashable, dict[float, float]]:
    """{group value: {fraction: percentile_cont}} of `field` over `queryset`, in one query.

    The window-function way, for databases without percentile_cont (SQLite):
    each group's values are ranked, and only the ranks next to (n - 1) * f come
    back. A group with no value (all NULL) is missing from the answer.
    """
    if not fractions:
        return {}
    partition = [F(group)] if group is not None else None
    ranked = (
        queryset.order_by()
        .filter(**{f"{field}__isnull": False})
        .annotate(
            pct_group=F(group) if group is not None else Value(""),
            pct_value=F(field),
            pct_rank=Window(RowNumber(), partition_by=partition, order_by=F(field).asc()),
            pct_count=Window(Count("pk"), partition_by=partition),
        )
        .values("pct_group", "pct_value", "pct_rank", "pct_count")
    )
    inner, params = ranked.query.sql_with_params()
    # The ranks within 1 of h: floor(h) and ceil(h), or h itself when it is whole.
    near = '("pct_rank" - 1 > ("pct_count" - 1) * %s - 1 AND "pct_rank" - 1 < ("pct_count" - 1) * %s + 1)'
    # Django's own SQL for the inner query and constants of ours around it; the values
    # (the inner query's and the fractions) all go as parameters.
    sql = (
        'SELECT "pct_group", "pct_value", "pct_rank", "pct_count" '  # noqa: S608
        f"FROM ({inner}) ranked WHERE {' OR '.join([near] * len(fractions))}"
    )
    outer = [float(x) for f in fractions for x in (f, f)]
    values: dict[Hashable, dict[int, float]] = defaultdict(dict)
    counts: dict[Hashable, int] = {}
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(sql, (*params, *outer))
        for key, value, rank, count in cursor.fetchall():
            key = key if group is not None else None
            values[key][int(rank)] = float(value)
            counts[key] = int(count)
    return {
        key: {f: _interpolate(ranked_values, counts[key], f) for f in fractions}
        for key, ranked_values in values.items()
    }
