"""Runs: start one for a user message, execute it, cancel it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Max, Q
from django.utils import timezone

from chat.dispatch import dispatch_run
from chat.events import event_publish
from chat.exceptions import Conflict, InvalidInput, RunNotFound
from chat.models import (
    ACTIVE_RUN_STATUSES,
    FINISHED_EXECUTION_STATUSES,
    Conversation,
    Message,
    Role,
    Run,
    RunStatus,
    ToolExecution,
)
from chat.services import turn
from tools.executor import cancelled_result


def run_start(
    *,
    conversation: Conversation,
    content: str,
    user: AbstractBaseUser | AnonymousUser | None = None,
) -> Run:
    """Store the user's message and a queued run in one transaction; queue the run on commit."""
    if not isinstance(content, str) or not content.strip():
        raise InvalidInput("The message is empty.", field="content")
    limit = settings.MAX_MESSAGE_CHARS
    if len(content) > limit:
        raise InvalidInput(
            f"The message is {len(content):,} characters long; the limit is {limit:,}.",
            field="content",
            details={"max_chars": limit, "chars": len(content)},
        )
    try:
        with transaction.atomic():
            # The conversation row lock orders concurrent posts to one conversation.
            locked = Conversation.objects.select_for_update(no_key=True).get(pk=conversation.pk)
            active = Run.objects.filter(conversation=locked, status__in=ACTIVE_RUN_STATUSES).first()
            if active is not None:
                raise _busy(active)
            last = Message.objects.filter(conversation=locked).aggregate(m=Max("position"))["m"]
            run = Run.objects.create(conversation=locked, mode=locked.mode)
            message = Message.objects.create(
                conversation=locked,
                run=run,
                position=0 if last is None else last + 1,
                role=Role.USER,
                content=content,
            )
            run.trigger_message = message
            run.save(update_fields=["trigger_message"])
            locked.save(update_fields=["updated_at"])
            transaction.on_commit(lambda: dispatch_run(run.pk))
    except IntegrityError:
        # The database's one-active-run constraint caught a race the lock did not.
        active = Run.objects.filter(
            conversation=conversation, status__in=ACTIVE_RUN_STATUSES
        ).first()
        if active is None:
            raise
        raise _busy(active) from None
    return run


def _busy(active: Run) -> Conflict:
    return Conflict(
        "A run of this conversation is still in progress; wait for it or cancel it.",
        details={"run_id": str(active.pk), "status": active.status},
    )


def run_execute(*, run_id: Any) -> None:
    """Do the next step of a run (what the task layer calls)."""
    turn.run_advance(run_id=run_id)


def run_cancel(*, run: Run) -> Run:
    """Stop a queued or running run; unanswered tool calls get a 'cancelled' result."""
    with transaction.atomic():
        locked = Run.objects.select_for_update(no_key=True).get(pk=run.pk)
        if locked.status not in ACTIVE_RUN_STATUSES:
            raise Conflict(
                f"The run is already {locked.status}; only a queued or running run can be cancelled.",
                details={"run_id": str(locked.pk), "status": locked.status},
            )
        now = timezone.now()
        unfinished = turn.close_unfinished_calls(locked, cancelled_result)
        locked.status = RunStatus.CANCELLED
        locked.finished_at = now
        locked.latency_ms = int((now - locked.created_at).total_seconds() * 1000)
        locked.lease = None
        locked.save(update_fields=["status", "finished_at", "latency_ms", "lease"])
        event_publish(
            run=locked,
            type="run.cancelled",
            data={"cancelled_tool_calls": [e.tool_call_id for e in unfinished]},
        )
    return locked


def run_cancel_by_id(*, conversation_id: Any, run_id: Any) -> Run:
    """Cancel a run of the given conversation (RunNotFound if it is not one of its runs)."""
    try:
        run = Run.objects.get(pk=run_id, conversation_id=conversation_id)
    except (Run.DoesNotExist, ValueError, ValidationError):
        raise RunNotFound("No such run in this conversation.", field="run_id") from None
    return run_cancel(run=run)


def runs_recover() -> list[Any]:
    """Queue every active run that nobody has shown a sign of life for; return their ids.

    A run is lost when its task vanished: a worker (or, without Redis, the web
    process) died, or a queued run's task was never sent. Queuing it again is
    safe: `run_advance` takes over only a free or stale lease and resumes from
    the database. Celery beat runs this every TOOLCHAT_RECOVER_S; without
    Redis, the web process does (project/asgi.py).
    """
    now = timezone.now()
    cutoff = now - timedelta(seconds=settings.TOOLCHAT_RUN_STALE_S)
    candidates = list(
        Run.objects.filter(status__in=(RunStatus.QUEUED, RunStatus.RUNNING))
        .filter(Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, created_at__lt=cutoff))
        .values_list("pk", "lease")
    )
    # A run parked on its tools (no lease) is waiting, not lost, while every
    # unfinished call is still within its time: leave those alone.
    parked = [run_id for run_id, lease in candidates if lease is None]
    waiting: set[Any] = set()
    if parked:
        unfinished = ToolExecution.objects.filter(run_id__in=parked).exclude(
            status__in=FINISHED_EXECUTION_STATUSES
        )
        lost_calls: set[Any] = set()
        for execution in unfinished:
            waiting.add(execution.run_id)
            started = execution.started_at or execution.created_at
            limit = (
                turn.tool_deadline(execution)
                if execution.started_at
                else settings.TOOLCHAT_RUN_STALE_S
            )
            if (now - started).total_seconds() > limit:
                lost_calls.add(execution.run_id)
        waiting -= lost_calls
    lost = [run_id for run_id, _ in candidates if run_id not in waiting]
    for run_id in lost:
        dispatch_run(run_id)
    return lost
