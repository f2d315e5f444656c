"""Writing the budget limits: one at a time (the REST API, the admin), or all at once (a file).

A limit is validated by `chat.inputs.BudgetLimitInput` whichever way it
comes; the policies file's `limits` (chat/services/policies.py) replaces
them whole or not at all. A change applies to the next post of each covered
person, and to runs made after it (a run keeps the per-run limits it
started with).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from chat.history import cost_figure
from chat.models import BudgetLimit
from chat.models.budgets import LIMIT_FIGURES


def limit_create(*, users: Any = (), groups: Any = (), **fields: Any) -> BudgetLimit:
    """Store a new limit."""
    with transaction.atomic():
        limit = BudgetLimit.objects.create(**fields)
        limit.users.set(users)
        limit.groups.set(groups)
    return limit


def limit_update(*, limit: BudgetLimit, **fields: Any) -> BudgetLimit:
    """Change a limit's fields (those given); the same checks as a new one's."""
    with transaction.atomic():
        people = {key: fields.pop(key) for key in ("users", "groups") if key in fields}
        for name, value in fields.items():
            setattr(limit, name, value)
        limit.save()
        for key, value in people.items():
            getattr(limit, key).set(value)
    return limit


def limit_delete(*, limit: BudgetLimit) -> None:
    """Remove a limit. Runs under way keep the per-run limits they started with."""
    limit.delete()


def limit_stored(limit: BudgetLimit) -> dict[str, Any]:
    """The limit's stored figures, as `BudgetLimitInput` checks a partial update against."""
    return {"period": limit.period, **{name: getattr(limit, name) for name in LIMIT_FIGURES}}


def limit_data(limit: BudgetLimit) -> dict[str, Any]:
    """A limit as the file and the API write it: who, period, figures (null: no cap), hard, note."""
    figures: dict[str, Any] = {name: getattr(limit, name) for name in LIMIT_FIGURES}
    figures["cost_usd"] = cost_figure(figures["cost_usd"])
    return {
        "users": sorted(user.get_username() for user in limit.users.all()),
        "groups": sorted(group.name for group in limit.groups.all()),
        "period": limit.period,
        **figures,
        "hard": limit.hard,
        "note": limit.note,
    }


def limits_dump() -> list[dict[str, Any]]:
    """Every limit, oldest first, as the policies file's `limits`."""
    limits = BudgetLimit.objects.prefetch_related("users", "groups").order_by("id")
    return [limit_data(limit) for limit in limits]
