"""What a person used this day or month, per model and per day, and their limits: `GET /api/v1/usage/`.

The same model calls and reservations a post's budget check counts
(chat/budgets.py); dollars are null where no call had a price, never a made-up 0.
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Count, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from chat.budget_use import Use, period_bounds, use_read
from chat.budgets import limits_for
from chat.models import BudgetPeriod, ModelCall
from chat.timestamps import iso_time


def usage_report(user_id: Any, period: str, now: datetime.datetime | None = None) -> dict[str, Any]:
    """The user's tokens and dollars this day or month, per model and per day, and their limits.

    As `GET /api/v1/usage/` answers (docs/api.md): dollars are null where no
    call had a price, never a made-up 0. A limit's `used_*` count the
    reservations of runs in flight, as a post's check does.
    """
    now = now or timezone.now()
    since, resets_at = period_bounds(period, now)
    calls = ModelCall.objects.filter(run__conversation__owner_id=user_id, started_at__gte=since)
    sums = {
        "calls": Count("pk"),
        "prompt": Sum("prompt_tokens"),
        "completion": Sum("completion_tokens"),
        "cost": Sum("cost_usd"),
    }
    by_model = [
        {
            "model": row["model"],
            "provider": row["provider"],
            "calls": row["calls"],
            "prompt_tokens": row["prompt"] or 0,
            "completion_tokens": row["completion"] or 0,
            "tokens": (row["prompt"] or 0) + (row["completion"] or 0),
            "cost_usd": _dollars(row["cost"]),
        }
        for row in calls.values("provider", "model").annotate(**sums).order_by("provider", "model")
    ]
    days = calls.annotate(day=TruncDate("started_at", tzinfo=datetime.UTC)).values("day")
    by_day = [
        {
            "day": row["day"].isoformat(),
            "tokens": (row["prompt"] or 0) + (row["completion"] or 0),
            "cost_usd": _dollars(row["cost"]),
        }
        for row in days.annotate(**sums).order_by("day")
    ]
    costs = [row["cost_usd"] for row in by_model if row["cost_usd"] is not None]
    use = use_read(user_id, now)
    reserved = use.in_flight
    return {
        "period": period,
        "since": iso_time(since),
        "resets_at": iso_time(resets_at),
        "tokens": sum(row["tokens"] for row in by_model),
        "cost_usd": round(sum(costs), 8) if costs else None,
        "reserved": {"tokens": reserved.tokens, "cost_usd": float(reserved.cost_usd)},
        "by_model": by_model,
        "by_day": by_day,
        "limits": _limits_used(user_id, now, use),
    }


def _dollars(value: Decimal | None) -> float | None:
    return None if value is None else float(value)


def _limits_used(user_id: Any, now: datetime.datetime, use: Use) -> list[dict[str, Any]]:
    """Each limit covering the user, with what a post's check counts against it."""
    listed = []
    for limit in limits_for(user_id):
        data = limit.as_data()
        if limit.period != BudgetPeriod.RUN:
            total = use.of(limit.period)
            data["used_tokens"] = total.tokens
            data["used_cost_usd"] = float(total.cost_usd)
            data["resets_at"] = iso_time(period_bounds(limit.period, now)[1])
        listed.append(data)
    return listed
