"""What each person used in a period: their runs, model calls, tokens and dollars.

`/audit/`'s People table and its CSV; the budgets (docs/governance.md)
count the same model calls per person. One grouped query, however many
people; the heaviest users first.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, F, Sum

from chat.audit.period import Period
from chat.models import ModelCall

# The most people the table lists (the rest are cut, and said to be).
MAX_PEOPLE = 50


@dataclass(frozen=True)
class PersonRow:
    """A person's model calls in the period."""

    username: str
    runs: int
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None  # of the calls with a price; None when none had one

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def person_stats(
    period: Period, *, limit: int = MAX_PEOPLE, replays: bool = False
) -> list[PersonRow]:
    """Per person, most tokens first: runs, model calls, tokens in and out, dollars."""
    calls = ModelCall.objects.filter(started_at__gte=period.start, started_at__lt=period.end)
    if not replays:
        calls = calls.filter(replay=False)
    rows = (
        calls.values("run__conversation__owner__username")
        .annotate(
            runs=Count("run", distinct=True),
            calls=Count("pk"),
            prompt=Sum("prompt_tokens", default=0),
            completion=Sum("completion_tokens", default=0),
            cost=Sum("cost_usd"),
        )
        .annotate(total=F("prompt") + F("completion"))
        .order_by("-total", "run__conversation__owner__username")[:limit]
    )
    return [
        PersonRow(
            username=row["run__conversation__owner__username"] or "",
            runs=row["runs"],
            calls=row["calls"],
            prompt_tokens=int(row["prompt"]),
            completion_tokens=int(row["completion"]),
            cost_usd=None if row["cost"] is None else float(row["cost"]),
        )
        for row in rows
    ]
