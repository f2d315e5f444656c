"""Celery tasks: thin wrappers that take an id and call one engine function.

Both are acknowledged late and rejected when their worker dies, so a crash
puts them back on the queue; the functions they call are idempotent, which is
what makes that safe (a finished step is never done twice). The engine queues
them by name (chat/engine/dispatch.py); without a broker they run in threads.
"""

from __future__ import annotations

from celery import shared_task

from chat.engine.dispatch import RUN_TASK, TOOL_TASK
from chat.engine.recovery import runs_recover
from chat.engine.run import run_advance
from chat.engine.tool_calls import tool_call_execute


@shared_task(name=RUN_TASK, acks_late=True, reject_on_worker_lost=True)
def run_execute_task(run_id: str) -> None:
    """Do the next step of a run (a model call, or what follows the tools)."""
    run_advance(run_id=run_id)


@shared_task(name=TOOL_TASK, acks_late=True, reject_on_worker_lost=True)
def tool_execute_task(execution_id: str) -> None:
    """Run one tool call and store its result."""
    tool_call_execute(execution_id=execution_id)


@shared_task(name="chat.runs_recover", ignore_result=True)
def runs_recover_task() -> int:
    """Queue again the runs whose workers died (run by Celery beat)."""
    return len(runs_recover())
