"""What a person used: the tokens and dollars of their day and month, and what their runs hold.

Read in one statement when a post is checked against a day's or month's limit
(`use_read`, called by chat/budgets.py `budget_reserve`) and by the usage
report (chat/usage.py). The limits themselves, and what a run reserves, are
chat/budgets.py's.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection

from chat.models import ACTIVE_RUN_STATUSES, BudgetPeriod, ModelCall


@dataclasses.dataclass(frozen=True)
class Used:
    """Tokens and dollars used (dollars of the priced calls only)."""

    tokens: int = 0
    cost_usd: Decimal = Decimal(0)

    def __add__(self, other: Used) -> Used:
        return Used(self.tokens + other.tokens, self.cost_usd + other.cost_usd)

    def of(self, figure: str) -> Any:
        return self.tokens if figure == "tokens" else self.cost_usd


def period_bounds(
    period: str, now: datetime.datetime
) -> tuple[datetime.datetime, datetime.datetime]:
    """When the day or month (UTC) that holds `now` began, and when the next begins."""
    now = now.astimezone(datetime.UTC)
    start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == BudgetPeriod.DAY:
        return start, start + datetime.timedelta(days=1)
    start = start.replace(day=1)
    following = (start + datetime.timedelta(days=32)).replace(day=1)
    return start, following


@dataclasses.dataclass(frozen=True)
class Use:
    """What a person used since the day's and the month's start, and what their runs hold."""

    day: Used
    month: Used
    in_flight: Used  # reserved by their runs in flight, and not used yet

    def of(self, period: str) -> Used:
        """What a post's check counts against a limit of `period`: used, and held in flight."""
        return (self.day if period == BudgetPeriod.DAY else self.month) + self.in_flight


# The tokens and dollars of the person's model calls since the day's and the month's
# start (UTC), and what their runs in flight reserved beyond what they used, each run
# on its own (a run past its reservation holds nothing more): one statement.
_USE = """
SELECT used.day_tokens, used.day_cost, used.month_tokens, used.month_cost,
       held.tokens, held.cost
FROM (
    SELECT
        SUM(CASE WHEN mc.started_at >= %s THEN {tokens} END) AS day_tokens,
        SUM(CASE WHEN mc.started_at >= %s THEN mc.cost_usd END) AS day_cost,
        SUM(CASE WHEN mc.started_at >= %s THEN {tokens} END) AS month_tokens,
        SUM(CASE WHEN mc.started_at >= %s THEN mc.cost_usd END) AS month_cost
    FROM chat_modelcall AS mc
    JOIN chat_run AS r ON r.id = mc.run_id
    JOIN chat_conversation AS c ON c.id = r.conversation_id
    WHERE c.owner_id = %s AND mc.started_at >= %s
) AS used, (
    SELECT
        SUM(CASE WHEN tokens > used_tokens THEN tokens - used_tokens ELSE 0 END) AS tokens,
        SUM(CASE WHEN cost > used_cost THEN cost - used_cost ELSE 0 END) AS cost
    FROM (
        SELECT {reserved_tokens} AS tokens, {reserved_cost} AS cost,
            COALESCE((SELECT SUM({tokens}) FROM chat_modelcall AS mc
                      WHERE mc.run_id = r.id), 0) AS used_tokens,
            COALESCE((SELECT SUM(mc.cost_usd) FROM chat_modelcall AS mc
                      WHERE mc.run_id = r.id), 0) AS used_cost
        FROM chat_run AS r
        JOIN chat_conversation AS c ON c.id = r.conversation_id
        WHERE c.owner_id = %s AND r.status IN (%s, %s, %s) AND r.budget IS NOT NULL
    ) AS reserved
) AS held
"""


@functools.cache
def _use_sql(vendor: str) -> str:
    if vendor == "postgresql":
        reserved = "COALESCE((r.budget -> 'reserved' ->> '{}')::numeric, 0)"
    else:
        reserved = "COALESCE(json_extract(r.budget, '$.reserved.{}'), 0)"
    return _USE.format(
        tokens="COALESCE(mc.prompt_tokens, 0) + COALESCE(mc.completion_tokens, 0)",
        reserved_tokens=reserved.format("tokens"),
        reserved_cost=reserved.format("cost_usd"),
    )


def use_read(user_id: Any, now: datetime.datetime) -> Use:
    """What the user used this day and month, and what their runs in flight hold (one query)."""
    day, month = period_bounds("day", now)[0], period_bounds("month", now)[0]
    started = ModelCall._meta.get_field("started_at")
    day_at, month_at = (started.get_db_prep_value(at, connection) for at in (day, month))
    owner = get_user_model()._meta.pk.get_db_prep_value(user_id, connection)
    params = [day_at, day_at, month_at, month_at, owner, min(day_at, month_at), owner]
    params += [status.value for status in ACTIVE_RUN_STATUSES]
    with connection.cursor() as cursor:
        cursor.execute(_use_sql(connection.vendor), params)
        day_tokens, day_cost, month_tokens, month_cost, held_tokens, held_cost = cursor.fetchone()
    return Use(
        day=Used(int(day_tokens or 0), _decimal(day_cost)),
        month=Used(int(month_tokens or 0), _decimal(month_cost)),
        in_flight=Used(int(held_tokens or 0), _decimal(held_cost)),
    )


def _decimal(value: Any) -> Decimal:
    """A sum of dollars as the database gave it (PostgreSQL's numeric, SQLite's float).

    Rounded to the model call's 8 places, as the ORM would: SQLite sums floats,
    and 0.7 + 0.1 is 0.7999999999999999, which would not reach a cap of 0.80.
    """
    return Decimal(0) if value is None else Decimal(str(value)).quantize(_CENTS_OF_CENTS)


_CENTS_OF_CENTS = Decimal("1e-8")
