"""Ending a run: completed, failed or cancelled, with every open tool call answered.

One function says what an ended run's row holds (`run_end_fields`), and one
ends a run that still has open calls (`run_end`), whoever ends it: the engine
on success or failure, or a user's cancel (chat/services/runs.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.utils import timezone

from chat.engine.lease import run_write
from chat.engine.tool_calls import unfinished_calls_answer
from chat.live.events import event_publish, events_publish
from chat.models import Message, Run, RunStatus, ToolExecution
from tools.results import ToolResult, interrupted_result


def run_end_fields(run: Run, status: str) -> dict[str, Any]:
    """The columns of a run that ends now with `status`: times, latency, no lease."""
    now = timezone.now()
    return {
        "status": status,
        "finished_at": now,
        "latency_ms": int((now - run.created_at).total_seconds() * 1000),
        "lease": None,
        "heartbeat_at": now,
    }


def run_end(
    locked: Run, *, status: str, result_for: Callable[..., ToolResult], error: str = ""
) -> list[ToolExecution]:
    """End a run whose row the caller holds locked; its open calls get `result_for`'s answer.

    Returns the calls that were still open.
    """
    unfinished = unfinished_calls_answer(locked, result_for)
    fields = run_end_fields(locked, status)
    if error:
        fields["error"] = error
    Run.objects.filter(pk=locked.pk).update(**fields)
    for name, value in fields.items():
        setattr(locked, name, value)
    return unfinished


def run_completed_event(run: Run, final: Message) -> tuple[str, dict[str, Any]]:
    """The `run.completed` event of a run whose row now holds its end (`run_end_fields`)."""
    return (
        "run.completed",
        {
            "message_id": str(final.pk),
            "latency_ms": run.latency_ms,
            "model_calls": run.model_calls,
            "steps": run.steps,
        },
    )


def run_complete(run: Run, token: uuid.UUID, final: Message) -> None:
    """Mark the run completed with `final` as its answer (stored by an earlier transaction)."""
    with transaction.atomic():
        run_write(run, token, **run_end_fields(run, RunStatus.COMPLETED))
        events_publish(run=run, events=[run_completed_event(run, final)])


def run_fail(run: Run, token: uuid.UUID | None, error: str) -> None:
    """Mark the run failed with a readable error (if it is still ours to end)."""
    with transaction.atomic():
        locked = Run.objects.select_for_update(no_key=True).get(pk=run.pk)
        if locked.status not in (RunStatus.QUEUED, RunStatus.RUNNING):
            return
        if token is not None and locked.lease != token:
            return
        run_end(locked, status=RunStatus.FAILED, result_for=interrupted_result, error=error)
        event_publish(run=run, type="run.failed", data={"error": error})
