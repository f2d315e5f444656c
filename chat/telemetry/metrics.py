"""Prometheus metrics: the turn, its model calls and its tools, and what is waiting.

Off unless `GET /metrics` is configured (a bearer token, `TOOLCHAT_METRICS_TOKEN`,
or allowed networks, `TOOLCHAT_METRICS_NETWORKS`): then each observation is a
prometheus-client counter or histogram, recorded at the engine's single points
(a model call, a tool execution, a run's end). What is waiting (runs by
status, calls awaiting approval, the task queue's depth) is read when scraped,
from the database and the broker, so it is right whichever process did the work.

Replays (docs/replay.md) are not real traffic: a replay's turn, model calls
and tool calls are counted in series of their own, `toolchat_replay_*`, the
twins of those of real traffic (same type, labels and buckets), so that a
dashboard or an alert on `toolchat_*` sees the users' traffic alone, and one
that wants the replays too adds the twin.

Web processes and Celery workers are separate processes: with
`PROMETHEUS_MULTIPROC_DIR` set (a directory they share, emptied when they
start) each writes its figures there and `/metrics` adds them up
(prometheus-client's multiprocess mode); without it, `/metrics` reports the
process that answers it, which is all of toolchat when tasks run in-process.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC
from typing import TYPE_CHECKING, Any, TypeVar

from django.conf import settings
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

Metric = TypeVar("Metric", bound=MetricWrapperBase)

if TYPE_CHECKING:
    from chat.llm.base import Completion
    from chat.models import ModelCall, Run
    from tools.results import ToolResult

# Turns take seconds to minutes; model calls and tools a fraction of a second to minutes.
_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, float("inf"))


def _twins(
    kind: type[Metric], name: str, documentation: str, **options: Any
) -> tuple[Metric, Metric]:
    """A metric of real traffic, `toolchat_<name>`, and its twin for replays."""
    return (
        kind(f"toolchat_{name}", documentation, **options),
        kind(f"toolchat_replay_{name}", f"{documentation} Replays only.", **options),
    )


def _of(twins: tuple[Metric, Metric], run: Run) -> Metric:
    """The twin that counts `run`: real traffic's, or the replays'."""
    return twins[run.replay_of_id is not None]


TURN_DURATION = _twins(
    Histogram,
    "turn_duration_seconds",
    "A turn from its post to its end (the run's latency) less its waits for a person's "
    "approval, by mode, model and outcome.",
    labelnames=["mode", "model", "outcome"],
    buckets=_SECONDS,
)
# People's time, not toolchat's: a turn that waited an hour for an approval is no slow turn.
TURN_APPROVAL_WAIT = _twins(
    Histogram,
    "turn_approval_wait_seconds",
    "How long a turn that waited for a person's approval waited, by mode, model and outcome.",
    labelnames=["mode", "model", "outcome"],
    buckets=(1, 5, 10, 30, 60, 300, 900, 1800, 3600, 14400, 86400, float("inf")),
)
TIME_TO_FIRST_TOKEN = _twins(
    Histogram,
    "time_to_first_token_seconds",
    "A model call's request to its first streamed token, by mode and model.",
    labelnames=["mode", "model"],
    buckets=_SECONDS,
)
MODEL_CALL_DURATION = _twins(
    Histogram,
    "model_call_duration_seconds",
    "A model call, retries included, by provider, model and outcome.",
    labelnames=["provider", "model", "outcome"],
    buckets=_SECONDS,
)
MODEL_TOKENS = _twins(
    Counter,
    "model_tokens",
    "Tokens of model calls, by provider, model and type (input, output).",
    labelnames=["provider", "model", "type"],
)
# Only calls whose model has a price count: a model with none adds nothing (never a 0 cost).
MODEL_COST = _twins(
    Counter,
    "model_cost_usd",
    "US dollars of model calls at the providers file's prices, by provider and model.",
    labelnames=["provider", "model"],
)
TOOL_CALL_DURATION = _twins(
    Histogram,
    "tool_call_duration_seconds",
    "A tool execution, by tool and status (succeeded, failed, timed_out, cancelled).",
    labelnames=["tool", "status"],
    buckets=_SECONDS,
)
EVENT_LAG = Histogram(
    "toolchat_event_fanout_lag_seconds",
    "A live event's storing (in the worker) to its arrival in a client's stream (WebSocket or SSE).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, float("inf")),
)


def metrics_enabled() -> bool:
    """Whether /metrics is configured, and so whether anything is recorded."""
    return bool(settings.TOOLCHAT_METRICS_TOKEN or settings.TOOLCHAT_METRICS_NETWORKS)


def model_call_observe(run: Run, row: ModelCall, completion: Completion | None) -> None:
    """Count one model call that ended (answered or failed)."""
    if not metrics_enabled():
        return
    model = row.model or ""
    outcome = "succeeded" if completion is not None else "failed"
    durations = _of(MODEL_CALL_DURATION, run)
    if row.latency_ms is not None:
        durations.labels(row.provider, model, outcome).observe(row.latency_ms / 1000)
    elif completion is None and row.started_at is not None:
        from django.utils import timezone

        elapsed = (timezone.now() - row.started_at).total_seconds()
        durations.labels(row.provider, model, outcome).observe(elapsed)
    if completion is None:
        return
    if completion.first_token_ms is not None:
        first_token = _of(TIME_TO_FIRST_TOKEN, run).labels(str(run.mode), model)
        first_token.observe(completion.first_token_ms / 1000)
    tokens = _of(MODEL_TOKENS, run)
    if completion.prompt_tokens:
        tokens.labels(row.provider, model, "input").inc(completion.prompt_tokens)
    if completion.completion_tokens:
        tokens.labels(row.provider, model, "output").inc(completion.completion_tokens)
    if row.cost_usd is not None:
        _of(MODEL_COST, run).labels(row.provider, model).inc(float(row.cost_usd))


def tool_call_observe(run: Run, name: str, result: ToolResult) -> None:
    """Count one tool execution (of a replay with live tools, among the replays')."""
    if metrics_enabled():
        durations = _of(TOOL_CALL_DURATION, run)
        durations.labels(name, str(result.status)).observe(result.duration_ms / 1000)


def event_lag_observe(stored_at: str) -> None:
    """Count one live event handed to a client's stream, by its lag since it was stored."""
    if not metrics_enabled():
        return
    from datetime import datetime

    lag = datetime.now(UTC) - datetime.fromisoformat(stored_at)
    EVENT_LAG.observe(max(lag.total_seconds(), 0.0))


def turn_observe(run: Run) -> None:
    """Count one turn that ended (completed, failed or cancelled)."""
    own = run.own_latency_ms
    if not metrics_enabled() or own is None:
        return
    conversation = run.conversation if type(run).conversation.is_cached(run) else None
    model = conversation.model if conversation is not None else ""
    labels = (str(run.mode), model, str(run.status))
    _of(TURN_DURATION, run).labels(*labels).observe(max(0, own) / 1000)
    if run.approval_wait_ms is not None:
        _of(TURN_APPROVAL_WAIT, run).labels(*labels).observe(run.approval_wait_ms / 1000)


class WaitingCollector(Collector):
    """What is waiting, read at each scrape: runs by status, approvals, the task queue."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from django.db.models import BooleanField, Count, ExpressionWrapper, Q

        from chat.models import ACTIVE_RUN_STATUSES, ExecutionStatus, Run, ToolExecution

        counts = {
            (status, replay): n
            for status, replay, n in Run.objects.filter(status__in=ACTIVE_RUN_STATUSES)
            .annotate(
                replay=ExpressionWrapper(Q(replay_of__isnull=False), output_field=BooleanField())
            )
            .values_list("status", "replay")
            .annotate(n=Count("id"))
            .values_list("status", "replay", "n")
        }
        waiting = dict(
            ToolExecution.objects.filter(status=ExecutionStatus.AWAITING_APPROVAL)
            .values_list("replay")
            .annotate(n=Count("id"))
            .values_list("replay", "n")
        )
        for replay, prefix in ((False, "toolchat_"), (True, "toolchat_replay_")):
            runs = GaugeMetricFamily(
                f"{prefix}runs_active",
                "Runs not ended, by status (queued, running, awaiting_approval)."
                + (" Replays only." if replay else ""),
                labels=["status"],
            )
            for status in ACTIVE_RUN_STATUSES:
                runs.add_metric([str(status)], counts.get((status, replay), 0))
            yield runs
            yield GaugeMetricFamily(
                f"{prefix}tool_calls_awaiting_approval",
                "Tool calls waiting for a person's decision."
                + (" Replays only." if replay else ""),
                value=waiting.get(replay, 0),
            )
        depth = _queue_depth()
        if depth is not None:
            yield GaugeMetricFamily(
                "toolchat_task_queue_depth",
                "Tasks queued and not yet taken by a worker (Celery's queue, or the in-process pool's).",
                value=depth,
            )


def _queue_depth() -> int | None:
    """Tasks waiting: the length of Celery's Redis queue, or of the in-process pool's."""
    if settings.TOOLCHAT_TASKS_IN_PROCESS:
        from chat.engine.dispatch import in_process_backlog

        return in_process_backlog()
    try:
        from celery import current_app

        with current_app.connection_for_read() as connection:
            channel: Any = connection.default_channel
            client = channel.client
            return int(client.llen(current_app.conf.task_default_queue or "celery"))
    except Exception:
        return None  # the broker is unreachable, or not Redis: no figure rather than a wrong one


def registry() -> CollectorRegistry:
    """The registry /metrics reports: this process's, or every process's (multiprocess mode)."""
    from prometheus_client import REGISTRY, ProcessCollector, multiprocess

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        collected = CollectorRegistry()
        multiprocess.MultiProcessCollector(collected)  # type: ignore[no-untyped-call]
        ProcessCollector(registry=collected)
    else:
        collected = REGISTRY
    if not getattr(collected, "_toolchat_waiting", False):
        collected.register(WaitingCollector())
        collected._toolchat_waiting = True  # type: ignore[attr-defined]
    return collected
