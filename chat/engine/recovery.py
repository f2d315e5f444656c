"""The sweep: lost runs (their worker died, or their task never left) queued again, and
approvals nobody gave in time turned into rejections."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connections
from django.db.models import Q
from django.utils import timezone

from chat.engine.approvals import approvals_expire
from chat.engine.call_liveness import call_dead_in
from chat.engine.dispatch import dispatch_run, dispatch_tool
from chat.engine.lease import restart_grace_left, stale_cutoff
from chat.models import (
    FINISHED_EXECUTION_STATUSES,
    ExecutionStatus,
    Run,
    RunStatus,
    ToolExecution,
)

logger = logging.getLogger(__name__)


def runs_recover() -> list[Any]:
    """Queue every active run that nobody has shown a sign of life for; return their ids.

    Expired approvals are rejected first (`approvals_expire`). A run is lost
    when its task vanished: a worker (or, without Redis, the web
    process) died, or a queued run's task was never sent. Queuing it again is
    safe: `run_advance` takes over only a free or stale lease and resumes from
    the database. Celery beat runs this every TOOLCHAT_RECOVER_S; without
    Redis, the web process does (`start_in_process_recovery`).
    """
    approvals_expire()
    now = timezone.now()
    grace_left = restart_grace_left(now)
    _dead_calls_of_waiting_runs_answer(now, grace_left)
    cutoff = stale_cutoff(now)
    if cutoff is None:
        return []  # the database has just restarted: its workers are given time first
    candidates = list(
        Run.objects.filter(status__in=(RunStatus.QUEUED, RunStatus.RUNNING))
        .filter(Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, created_at__lt=cutoff))
        .values_list("pk", "lease", "status")
    )
    # A run parked on its tools (no lease) is waiting, not lost, while every
    # unfinished call is still within its time: leave those alone.
    parked = [run_id for run_id, lease, _ in candidates if lease is None]
    waiting: set[Any] = set()
    if parked:
        unfinished = ToolExecution.objects.filter(run_id__in=parked).exclude(
            status__in=FINISHED_EXECUTION_STATUSES
        )
        lost_calls: set[Any] = set()
        for execution in unfinished:
            waiting.add(execution.run_id)
            if execution.started_at is not None:
                dead = call_dead_in(execution, now, grace_left=grace_left) <= 0
            else:
                # Queued when it was stored, or when a person approved it.
                queued = execution.decided_at or execution.created_at
                dead = (now - queued).total_seconds() > settings.TOOLCHAT_RUN_STALE_S
            if dead:
                lost_calls.add(execution.run_id)
        waiting -= lost_calls
    return [
        run_id
        for run_id, _, status in candidates
        if run_id not in waiting and _send_again(run_id, queued=status == RunStatus.QUEUED)
    ]


def _send_again(run_id: Any, *, queued: bool) -> bool:
    """Queue a lost run again; a run still queued at most once per TOOLCHAT_RESEND_S.

    A queued run nobody has picked up is most often waiting in the broker behind
    other work, its task there already: a copy at every sweep would pile up,
    and each copy delivered once the run had started would begin a chain of
    rechecks of its own (`run_recheck_later`). A copy that could not be sent
    (the broker down) is tried again at the next sweep.
    """
    key = f"toolchat:run-sent-again:{run_id}"
    if queued:
        try:
            if not cache.add(key, 1, timeout=max(1, int(settings.TOOLCHAT_RESEND_S))):
                return False
        except Exception as exc:  # the cache is Redis, which may be down: send anyway
            logger.warning("could not note run %s as sent again: %s", run_id, exc)
    if dispatch_run(run_id):
        return True
    if queued:
        with contextlib.suppress(Exception):
            cache.delete(key)
    return False


def _dead_calls_of_waiting_runs_answer(now: Any, grace_left: float) -> None:
    """A run waiting for a person is nobody's to take over, but its running calls may have died.

    In a step with a call that needs approval, the others run meanwhile; if the
    worker running one dies, nothing would answer it until the approval came
    (maybe an hour later), and it would show as running all that time. Queued
    again, it is run again if its tool is idempotent, or recorded interrupted
    (chat/engine/tool_calls.py `tool_call_execute`).
    """
    running = ToolExecution.objects.filter(
        run__status=RunStatus.AWAITING_APPROVAL,
        status=ExecutionStatus.RUNNING,
        started_at__isnull=False,
    )
    for execution in running:
        if call_dead_in(execution, now, grace_left=grace_left) <= 0:
            dispatch_tool(execution.pk)


def start_in_process_recovery() -> threading.Thread | None:
    """Without a broker, this web process looks for lost runs now and every TOOLCHAT_RECOVER_S."""
    if not settings.TOOLCHAT_TASKS_IN_PROCESS or settings.TOOLCHAT_RECOVER_S <= 0:
        return None

    def sweep() -> None:
        while True:
            try:
                recovered = runs_recover()
                if recovered:
                    logger.warning("re-queued %d lost run(s): %s", len(recovered), recovered)
            except Exception:
                logger.exception("looking for lost runs failed")
            finally:
                connections.close_all()
            time.sleep(settings.TOOLCHAT_RECOVER_S)

    thread = threading.Thread(target=sweep, name="toolchat-recovery", daemon=True)
    thread.start()
    return thread
