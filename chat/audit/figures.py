"""The statistics' figures (chat/audit/stats.py), one record per row a page shows.

What the audit overview reads of a period, shaped for its tables and plots
(chat/audit/tables.py, chat/audit/plots.py); the queries that fill them are
in chat/audit/stats.py, which says how each figure is counted.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from chat.audit.buckets import LatencyBin
from chat.audit.period import Period


@dataclass(frozen=True)
class ToolRow:
    """A tool's calls in the period: how many, how they ended, how long they took."""

    name: str
    calls: int
    failed: int  # failed, timed out or interrupted
    timeouts: int
    truncated: int
    p50_ms: float | None
    p95_ms: float | None
    max_ms: int | None
    # What the tool policies decided (chat/policies.py), and what people decided of those asked.
    allowed: int = 0
    asked: int = 0
    approved: int = 0
    rejected: int = 0
    expired: int = 0
    denied: int = 0


@dataclass(frozen=True)
class ModelRow:
    """A model's calls in the period: latency, time to first token, tokens."""

    model: str
    calls: int
    failed: int
    p50_ms: float | None
    p95_ms: float | None
    p50_first_token_ms: float | None
    p95_first_token_ms: float | None
    prompt_tokens: int
    completion_tokens: int
    # US dollars of the calls that have a price; None when none of them has one.
    cost_usd: float | None = None


@dataclass(frozen=True)
class RunTotals:
    """The period's runs at a glance."""

    runs: int
    completed: int
    failed: int
    cancelled: int
    p50_ms: float | None  # toolchat's latency: waits for people left out
    p95_ms: float | None
    max_ms: int | None
    model_calls: int
    waited: int = 0  # runs that waited for a person's decision
    wait_p50_ms: float | None = None  # of those runs, how long they waited
    wait_p95_ms: float | None = None


@dataclass(frozen=True)
class HistogramBin:
    bin: LatencyBin
    runs: int


@dataclass(frozen=True)
class TimeBinCount:
    """The runs created in [start, start + width): all of them, and how many failed."""

    start: datetime
    runs: int
    completed: int
    failed: int


@dataclass(frozen=True)
class TimeSeries:
    width_s: int
    bins: list[TimeBinCount]


@dataclass(frozen=True)
class SlowRun:
    id: uuid.UUID
    created_at: datetime
    status: str
    latency_ms: int  # the run's whole latency
    approval_wait_ms: int | None  # of it, waiting for a person (None: no wait)
    own_ms: int  # toolchat's: the latency less the wait, by which the runs are ordered
    question: str | None
    owner: str
    conversation_id: uuid.UUID
    conversation_title: str


@dataclass(frozen=True)
class AuditStats:
    period: Period
    replays: bool  # replays and their calls are counted
    totals: RunTotals
    tools: list[ToolRow]
    tools_cut: bool  # more tools than MAX_GROUPS were called
    models: list[ModelRow]
    models_cut: bool
    histogram: list[HistogramBin]
    over_time: TimeSeries
    slowest: list[SlowRun]
