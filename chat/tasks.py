"""Celery tasks: thin wrappers that take an id and call one service.

Both are acknowledged late and rejected when their worker dies, so a crash
puts them back on the queue; the services they call are idempotent, which is
what makes that safe (a finished step is never done twice).
"""

from __future__ import annotations

from celery import shared_task

from chat.services import runs, turn


@shared_task(name="chat.run_execute", acks_late=True, reject_on_worker_lost=True)
def run_execute_task(run_id: str) -> None:
    """Do the next step of a run (a model call, or what follows the tools)."""
    turn.run_advance(run_id=run_id)


@shared_task(name="chat.tool_execute", acks_late=True, reject_on_worker_lost=True)
def tool_execute_task(execution_id: str) -> None:
    """Run one tool call and store its result."""
    turn.tool_call_execute(execution_id=execution_id)


@shared_task(name="chat.runs_recover", ignore_result=True)
def runs_recover_task() -> int:
    """Queue again the runs whose workers died (run by Celery beat)."""
    return len(runs.runs_recover())
