"""Hand work to the task queue: Celery with Redis, or in-process background threads.

Services call these after commit. With REDIS_URL unset (the embedded default)
there is no broker, so the same service functions run on a small thread pool
in this process: a POST still returns at once, and the run goes on behind it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connections

logger = logging.getLogger(__name__)

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


def _run_in_thread(function: Callable[..., Any], **kwargs: Any) -> None:
    close_old_connections()
    try:
        function(**kwargs)
    except Exception:
        logger.exception("background task %s(%s) failed", function.__name__, kwargs)
    finally:
        # Each pool thread has its own connection; give it back between jobs.
        connections.close_all()


def _submit(function: Callable[..., Any], delay_s: float | None, **kwargs: Any) -> None:
    if getattr(settings, "TOOLCHAT_TASKS_EAGER", False) and not delay_s:
        # Inline, in the caller's thread and transaction: for tests that count
        # queries or want the whole turn done when the call returns.
        function(**kwargs)
        return
    pool = _in_process_pool()
    if delay_s:
        timer = threading.Timer(
            delay_s, pool.submit, args=(_run_in_thread, function), kwargs=kwargs
        )
        timer.daemon = True
        timer.start()
    else:
        pool.submit(_run_in_thread, function, **kwargs)


def dispatch_run(run_id: Any, *, delay_s: float | None = None) -> None:
    """Queue the next step of a run (after `delay_s` seconds, if given)."""
    if settings.TOOLCHAT_TASKS_IN_PROCESS:
        from chat.services.turn import run_advance

        _submit(run_advance, delay_s, run_id=run_id)
    else:
        from chat.tasks import run_execute_task

        run_execute_task.apply_async((str(run_id),), countdown=delay_s or 0)


def dispatch_tool(execution_id: Any, *, delay_s: float | None = None) -> None:
    """Queue one tool call (after `delay_s` seconds, if given)."""
    if settings.TOOLCHAT_TASKS_IN_PROCESS:
        from chat.services.turn import tool_call_execute

        _submit(tool_call_execute, delay_s, execution_id=execution_id)
    else:
        from chat.tasks import tool_execute_task

        tool_execute_task.apply_async((str(execution_id),), countdown=delay_s or 0)


def start_in_process_recovery() -> threading.Thread | None:
    """Without a broker, this web process looks for lost runs now and every TOOLCHAT_RECOVER_S."""
    if not settings.TOOLCHAT_TASKS_IN_PROCESS or settings.TOOLCHAT_RECOVER_S <= 0:
        return None

    def sweep() -> None:
        from chat.services.runs import runs_recover

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
