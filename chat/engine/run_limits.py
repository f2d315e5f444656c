"""A run's per-run budget limits, checked before each of its model calls after the first.

The limits a run started under are kept on it (`Run.budget`, chat/budgets.py
`budget_reserve`); a run over a hard one makes no more model calls (chat/engine/run.py
ends it), and one over a soft one is warned once per limit (the run's row keeps
which: `budget["warned"]`, written with the warnings by chat/engine/ledger/runs.py
`run_budget_warned`). Reads nothing for a run with no per-run limit, and
only what its limits cap: the tokens and dollars of its model calls, its tool calls.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from decimal import Decimal
from typing import Any

from django.db.models import Count, Sum
from django.utils import timezone

from chat.budget_use import Used
from chat.budgets import Limit, Reached, limits_reached
from chat.models import ModelCall, Run, ToolExecution


def run_used_keep(run: Run, pair: Any) -> None:
    """Keep on the run what its model calls used, as its claim read it: `[tokens, dollars]`.

    NULL for a run under no budget limit. Then each call of this worker adds
    its own (`run_used_add`), and the check before a model call reads nothing.
    """
    if isinstance(pair, str | bytes):
        pair = json.loads(pair)
    if pair is not None:
        tokens, dollars = pair
        vars(run)[_USED] = Used(int(tokens or 0), Decimal(str(dollars or 0)))


def run_used_add(run: Run, model_call: ModelCall) -> None:
    """Add a call's tokens and dollars to what its run keeps, if it keeps them."""
    used: Used | None = vars(run).get(_USED)
    if used is not None:
        tokens = (model_call.prompt_tokens or 0) + (model_call.completion_tokens or 0)
        vars(run)[_USED] = used + Used(tokens, model_call.cost_usd or Decimal(0))


_USED = "_budget_used"


def _calls_used(run: Run) -> Used:
    """The tokens and dollars of the run's model calls: as kept, or summed now."""
    kept: Used | None = vars(run).get(_USED)
    if kept is not None:
        return kept
    sums = ModelCall.objects.filter(run=run).aggregate(
        prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"), cost=Sum("cost_usd")
    )
    return Used((sums["prompt"] or 0) + (sums["completion"] or 0), sums["cost"] or Decimal(0))


def _run_used(run: Run, capped: set[str], now: datetime.datetime) -> dict[str, Any]:
    """What the run used of the figures its limits cap (a query only for those that need one)."""
    used: dict[str, Any] = {"model_calls": run.model_calls}
    if capped & {"tokens", "cost_usd"}:
        calls = _calls_used(run)
        used["tokens"] = calls.tokens
        used["cost_usd"] = calls.cost_usd
    if "tool_calls" in capped:
        used["tool_calls"] = ToolExecution.objects.filter(run=run).aggregate(n=Count("pk"))["n"]
    if "seconds" in capped and run.started_at is not None:
        used["seconds"] = int((now - run.started_at).total_seconds())
    return used


@dataclasses.dataclass(frozen=True)
class RunCheck:
    """What a run's per-run limits say before its next model call."""

    ended: str = ""  # the reason it ends (a hard limit reached); "" to go on
    fresh: tuple[Reached, ...] = ()  # soft limits reached and not yet warned of


def run_limit_check(run: Run, now: datetime.datetime | None = None) -> RunCheck:
    """Whether the run may make another model call under its per-run limits.

    Reads nothing for a run with no per-run limit, and only what its limits
    cap: the tokens and dollars of its model calls, its tool calls.
    """
    budget = run.budget or {}
    limits = [Limit.kept(data) for data in budget.get("limits") or []]
    if not limits or run.model_calls == 0:
        return RunCheck()
    capped = {figure for limit in limits for figure in limit.caps}
    used = _run_used(run, capped, now or timezone.now())
    reached = limits_reached(limits, used)
    hard = [found for found in reached if found.limit.hard]
    if hard:
        return RunCheck(ended=hard[0].sentence() + ": the run stopped there.")
    warned = set(budget.get("warned") or [])
    return RunCheck(fresh=tuple(found for found in reached if found.limit.id not in warned))
