"""Budgets: how much a person may spend, per day, per month, or in one run.

A limit covers people (its users and its groups; neither covers everyone) and
caps tokens and US dollars per day or per month, or, per run, tokens, dollars,
model calls, tool calls and wall-clock seconds. A hard limit refuses a post
once it is reached (chat/budgets.py), or ends a run that crossed it; a soft
one warns (a `budget.warning` event). docs/governance.md has the rules.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from chat.models.policies import Covering
from tools.fields import StorableTextField


class BudgetPeriod(models.TextChoices):
    """What a limit counts over: a calendar day or month (UTC), or one run."""

    DAY = "day", "Per day (UTC)"
    MONTH = "month", "Per month (UTC)"
    RUN = "run", "Per run"


# The figures a limit may cap, and of them those only a run has.
LIMIT_FIGURES = ("tokens", "cost_usd", "model_calls", "tool_calls", "seconds")
RUN_ONLY_FIGURES = ("model_calls", "tool_calls", "seconds")


class BudgetLimit(Covering):
    """One limit: for whom, over what period, how much, and whether it stops or warns."""

    period = models.CharField(max_length=8, choices=BudgetPeriod.choices)
    tokens = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Tokens in and out, summed over the model calls."
    )
    cost_usd = models.DecimalField(
        max_digits=14, decimal_places=6, null=True, blank=True, help_text="US dollars."
    )
    model_calls = models.PositiveIntegerField(null=True, blank=True, help_text="Per run only.")
    tool_calls = models.PositiveIntegerField(null=True, blank=True, help_text="Per run only.")
    seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="Wall-clock seconds of a run (per run only)."
    )
    hard = models.BooleanField(
        default=True, help_text="Hard: refuse (or end the run). Soft: warn and go on."
    )
    note = StorableTextField(blank=True, max_length=500, help_text="Why the limit exists.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(period__in=BudgetPeriod.values), name="budgetlimit_period_valid"
            ),
            # A limit caps something; a calendar period has no model calls, tool calls or
            # seconds of its own (chat/inputs.py says so first, with the field named).
            models.CheckConstraint(
                condition=~Q(
                    tokens__isnull=True,
                    cost_usd__isnull=True,
                    model_calls__isnull=True,
                    tool_calls__isnull=True,
                    seconds__isnull=True,
                ),
                name="budgetlimit_caps_something",
            ),
            models.CheckConstraint(
                condition=Q(period=BudgetPeriod.RUN)
                | Q(model_calls__isnull=True, tool_calls__isnull=True, seconds__isnull=True),
                name="budgetlimit_run_figures_per_run",
            ),
        ]

    def __str__(self) -> str:
        caps = ", ".join(
            f"{name} {getattr(self, name)}"
            for name in LIMIT_FIGURES
            if getattr(self, name) is not None
        )
        return f"#{self.pk} {'hard' if self.hard else 'soft'} per {self.period}: {caps}"
