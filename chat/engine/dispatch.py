"""Hand work to the task queue: Celery with Redis, or in-process background threads.

Services call these after commit. With REDIS_URL unset (the embedded default)
there is no broker, so the same tasks run on a small thread pool in this
process: a POST still returns at once, and the run goes on behind it.

When the broker cannot be reached, the work is not lost: what it was for is
stored (a queued run, a pending call), and the recovery sweep
(chat/engine/recovery.py) queues it again once the broker is back. So a
failed send is logged, not raised: a user's POST still gets its 202.

Tasks are named, not imported: chat/tasks.py (the Celery interface) calls the
engine, and the engine queues work through here, so the two never import
each other.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from celery import current_app
from django.conf import settings
from kombu.exceptions import OperationalError

from chat.database import connections_tidy

logger = logging.getLogger(__name__)

RUN_TASK = "chat.run_execute"
TOOL_TASK = "chat.tool_execute"

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _in_process_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=settings.TOOLCHAT_IN_PROCESS_WORKERS,
                thread_name_prefix="toolchat-task",
            )
        return _pool


def in_process_backlog() -> int:
    """Tasks waiting for a thread of the in-process pool (0 before its first task)."""
    pool = _pool
    return pool._work_queue.qsize() if pool is not None else 0


def _run_in_thread(function: Callable[..., Any], *args: Any) -> None:
    connections_tidy()
    try:
        function(*args)
    except Exception:
        logger.exception("background task %s%s failed", getattr(function, "name", function), args)
    finally:
        # Each pool thread has its own connection: a pooled one goes back between
        # jobs, a SQLite one stays open for the next.
        connections_tidy()


def _submit(function: Callable[..., Any], delay_s: float | None, *args: Any) -> None:
    if getattr(settings, "TOOLCHAT_TASKS_EAGER", False) and not delay_s:
        # Inline, in the caller's thread and transaction: for tests that count
        # queries or want the whole turn done when the call returns.
        function(*args)
        return
    pool = _in_process_pool()
    if delay_s:
        timer = threading.Timer(delay_s, pool.submit, args=(_run_in_thread, function, *args))
        timer.daemon = True
        timer.start()
    else:
        pool.submit(_run_in_thread, function, *args)


def _dispatch(task_name: str, object_id: Any, delay_s: float | None) -> bool:
    if settings.TOOLCHAT_TASKS_IN_PROCESS:
        # The task object itself, called in a thread: the same code a worker runs.
        _submit(current_app.tasks[task_name], delay_s, str(object_id))
        return True
    try:
        current_app.send_task(task_name, args=(str(object_id),), countdown=delay_s or 0)
    except (OperationalError, OSError) as exc:
        logger.error(
            "could not queue %s(%s), the broker is unreachable (%s); "
            "the recovery sweep will queue it again",
            task_name,
            object_id,
            exc,
        )
        return False
    return True


def dispatch_run(run_id: Any, *, delay_s: float | None = None) -> bool:
    """Queue the next step of a run (after `delay_s` seconds, if given); False if it could not be."""
    return _dispatch(RUN_TASK, run_id, delay_s)


def dispatch_tool(execution_id: Any, *, delay_s: float | None = None) -> None:
    """Queue one tool call (after `delay_s` seconds, if given)."""
    _dispatch(TOOL_TASK, execution_id, delay_s)
