"""Budgets: what a person has used, what their limits allow, and what their runs reserve.

The limits (chat/models/budgets.py) that cover a person are read when they
post (`budget_reserve`, in the transaction that stores the run):

- A day's or month's use is the tokens and dollars of the model calls made in
  it (UTC calendar), plus what the person's runs still in flight reserved and
  have not used yet. A post is refused (`BudgetExceeded`: HTTP 429, the
  socket's `error` frame, /v1's 429) once that reaches a hard limit, with
  nothing stored; a soft limit reached lets it through with a
  `budget.warning` event.
- A run reserves, of its owner's day and month, what its per-run hard limit
  allows (tokens, dollars), or `TOOLCHAT_BUDGET_RESERVE_TOKENS` tokens (and
  their price at the model's dearest rate). Taken under a lock on the owner's
  row, in the run's own transaction, so that concurrent posts, from any
  number of web processes, see each other's reservations: with room for ten
  runs, ten start. When the run ends its reservation stops counting, and
  only what it used does: a budget is overrun by at most what the runs in
  flight when it was reached use beyond their reservations.
- The per-run limits are kept on the run when it is made (`Run.budget`), and
  checked before each of its model calls after the first
  (chat/engine/run_limits.py):
  a run over a hard one ends failed, saying which limit; over a soft one, it
  is warned once and goes on.

The limits covering a person are read, and their row locked, in the statement
that locks the conversation for the post (chat/services/turn_lock.py): with
no limit, a post reads nothing more, and with limits of a day or a month one
query more, what they used (chat/budget_use.py `use_read`).
What a person used is reported by chat/usage.py. docs/governance.md, "Budgets",
is the user's view of this.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from chat.budget_use import Used, period_bounds, use_read
from chat.exceptions import BudgetExceeded
from chat.live.event_types import BudgetWarning
from chat.llm.endpoints import UnknownModel, call_cost, model_resolve
from chat.models import (
    BudgetLimit,
    BudgetPeriod,
)
from chat.models.budgets import LIMIT_FIGURES
from chat.timestamps import iso_time

# How a figure is written in a refusal or a warning.
_FIGURE_NAMES = {
    "tokens": "tokens",
    "cost_usd": "US dollars",
    "model_calls": "model calls",
    "tool_calls": "tool calls",
    "seconds": "seconds",
}
_PERIOD_NAMES = {"day": "daily", "month": "monthly", "run": "per-run"}


@dataclasses.dataclass(frozen=True)
class Limit:
    """A stored limit, as the checks read it."""

    id: int
    period: str
    hard: bool
    note: str
    caps: dict[str, Any]  # figure -> cap (int, or Decimal for cost_usd); only those set

    @classmethod
    def of(cls, row: BudgetLimit) -> Limit:
        caps = {name: getattr(row, name) for name in LIMIT_FIGURES}
        return cls(row.pk, row.period, row.hard, row.note, _set(caps))

    @classmethod
    def kept(cls, data: dict[str, Any]) -> Limit:
        """A limit as `as_data` kept it on a run."""
        caps = {name: data.get(name) for name in LIMIT_FIGURES}
        if caps["cost_usd"] is not None:
            caps["cost_usd"] = Decimal(str(caps["cost_usd"]))
        return cls(data["id"], data["period"], data["hard"], data.get("note", ""), _set(caps))

    def as_data(self) -> dict[str, Any]:
        """JSON-ready: every figure (null where it caps nothing), the dollars as a number."""
        figures = {name: _figure(name, self.caps.get(name)) for name in LIMIT_FIGURES}
        return {
            "id": self.id,
            "period": self.period,
            **figures,
            "hard": self.hard,
            "note": self.note,
        }


def _set(caps: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in caps.items() if value is not None}


def _figure(name: str, value: Any) -> Any:
    if value is None:
        return None
    return float(value) if name == "cost_usd" else int(value)


# A limit's columns as the statement that locks a conversation for a turn reads them
# (chat/services/turn_lock.py), in this order.
BUDGET_LIMIT_FIELDS = ("id", "period", "hard", "note", *LIMIT_FIGURES)


def limits_read(rows: Any) -> list[Limit]:
    """The limits as that statement gave them: `[[id, period, hard, note, figures...], ...]`."""
    listed = json.loads(rows) if isinstance(rows, str | bytes) else rows or []
    limits = []
    for row in sorted(listed, key=lambda row: row[0]):
        data = dict(zip(BUDGET_LIMIT_FIELDS, row, strict=True))
        data["hard"] = bool(data["hard"])
        limits.append(Limit.kept(data))
    return limits


def limits_for(user_id: Any) -> list[Limit]:
    """The limits that cover the user (theirs, their groups', everyone's), oldest first."""
    people = BudgetLimit.users.through._default_manager.filter(budgetlimit_id=OuterRef("pk"))
    groups = BudgetLimit.groups.through._default_manager.filter(budgetlimit_id=OuterRef("pk"))
    covered = (
        Q(~Exists(people), ~Exists(groups))
        | Exists(people.filter(user_id=user_id))
        | Exists(groups.filter(group__user=user_id))
    )
    return [Limit.of(row) for row in BudgetLimit.objects.filter(covered).order_by("id")]


@dataclasses.dataclass(frozen=True)
class Reached:
    """A limit reached: which, of what figure, the cap, what was used, when it resets."""

    limit: Limit
    figure: str
    used: Any
    resets_at: datetime.datetime | None = None

    def data(self) -> dict[str, Any]:
        """As the refusal's `details.limit` and the `budget.warning` event carry it."""
        data = {
            **self.limit.as_data(),
            "figure": self.figure,
            "used": _figure(self.figure, self.used),
        }
        if self.resets_at is not None:
            data["resets_at"] = iso_time(self.resets_at)
        return data

    def sentence(self) -> str:
        """The limit in words: "The daily limit of 10,000 tokens is reached (10,240 used)"."""
        cap, used = self.limit.caps[self.figure], self.used
        if self.figure == "cost_usd":
            cap_text, used_text = f"US${cap:,.2f}", f"US${used:,.2f}"
        else:
            cap_text, used_text = f"{cap:,} {_FIGURE_NAMES[self.figure]}", f"{used:,}"
        period = _PERIOD_NAMES[self.limit.period]
        text = f"The {period} limit of {cap_text} (budget limit {self.limit.id}) is reached"
        text += f" ({used_text} used)"
        if self.limit.note:
            text += f": {self.limit.note}"
        return text


def limits_reached(limits: Iterable[Limit], used: dict[str, Any], **kwargs: Any) -> list[Reached]:
    """Of `limits`, each figure whose use reached its cap (hard ones first, then by id)."""
    found = [
        Reached(limit, figure, used[figure], **kwargs)
        for limit in limits
        for figure, cap in limit.caps.items()
        if figure in used and used[figure] >= cap
    ]
    return sorted(found, key=lambda reached: (not reached.limit.hard, reached.limit.id))


@dataclasses.dataclass(frozen=True)
class Reservation:
    """A new run's budget: what to keep on it (`Run.budget`), and the warnings it publishes.

    `reached` are the soft limits of the day or month reached; `warnings`
    their `budget.warning` events, which the ledger makes
    (chat/services/runs.py `run_budget_reserve` asks it).
    """

    budget: dict[str, Any] | None = None
    reached: tuple[Reached, ...] = ()
    warnings: tuple[BudgetWarning, ...] = ()


def budget_reserve(
    *,
    user_id: Any,
    model: str,
    limits: list[Limit],
    owner_locked: bool,
    now: datetime.datetime | None = None,
) -> Reservation:
    """The budget a new run of the user starts under, checked.

    `limits` are those covering the user, read with the conversation's lock
    (chat/services/turn_lock.py), which also locked the user's row when a
    day's or month's limit covers them (`owner_locked`); here, in the
    transaction that stores the run, before anything is, what they used is
    read (one query) and BudgetExceeded raised when a hard limit of the day
    or month is reached (then nothing is stored). The soft limits reached
    come back (`reached`), for the `budget.warning` events the run publishes
    with its user message.
    """
    if not limits:
        return Reservation()
    now = now or timezone.now()
    per_run = [limit for limit in limits if limit.period == BudgetPeriod.RUN]
    periodic = [limit for limit in limits if limit.period != BudgetPeriod.RUN]
    reserved = _reservation(per_run, model)
    reached: list[Reached] = []
    if periodic:
        if not owner_locked:
            owner = get_user_model()
            owner.objects.select_for_update().filter(pk=user_id).values_list("pk").first()
        use = use_read(user_id, now)
        for period in ("day", "month"):
            total = use.of(period)
            figures = {"tokens": total.tokens, "cost_usd": total.cost_usd}
            covering = [limit for limit in periodic if limit.period == period]
            reached += limits_reached(covering, figures, resets_at=period_bounds(period, now)[1])
    hard = [found for found in reached if found.limit.hard]
    if hard:
        raise budget_exceeded(hard[0], now)
    budget = {
        "limits": [limit.as_data() for limit in per_run],
        "reserved": {"tokens": reserved.tokens, "cost_usd": float(reserved.cost_usd)},
        "warned": [],
    }
    return Reservation(budget, tuple(reached))


def budget_exceeded(reached: Reached, now: datetime.datetime) -> BudgetExceeded:
    """The refusal of a post over a hard limit: which limit, what was used, when it resets."""
    details: dict[str, Any] = {"limit": reached.data()}
    message = reached.sentence() + "."
    if reached.resets_at is not None:
        wait = max(1, int((reached.resets_at - now).total_seconds()) + 1)
        details["retry_after"] = wait
        message += f" It resets at {iso_time(reached.resets_at)}."
    return BudgetExceeded(message, details=details)


def _reservation(per_run: list[Limit], model: str) -> Used:
    """What a run reserves: its per-run hard caps, or the default tokens at the dearest price."""
    hard = [limit for limit in per_run if limit.hard]
    tokens = min(
        (limit.caps["tokens"] for limit in hard if "tokens" in limit.caps),
        default=settings.TOOLCHAT_BUDGET_RESERVE_TOKENS,
    )
    capped = [limit.caps["cost_usd"] for limit in hard if "cost_usd" in limit.caps]
    if capped:
        return Used(tokens, min(capped))
    return Used(tokens, _dearest(model, tokens))


def _dearest(model: str, tokens: int) -> Decimal:
    """`tokens` at the model's dearest rate (input or output); 0 when it has no price."""
    try:
        choice = model_resolve(model)
    except UnknownModel:
        return Decimal(0)
    costs = [
        call_cost(provider=choice.provider, models=[choice.model], prompt=p, completion=c)
        for p, c in ((tokens, 0), (0, tokens))
    ]
    return max((cost for cost in costs if cost is not None), default=Decimal(0))
