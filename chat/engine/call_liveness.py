"""Whether a running tool call is alive: its heartbeat, and when it is presumed dead.

The worker running a call renews the call's `heartbeat_at` (`CallHeartbeat`,
the same beat as a run's lease: chat/engine/lease.py). A call silent for
TOOLCHAT_RUN_STALE_S died with its worker; so did one still running past its
tool's timeout plus TOOLCHAT_TOOL_GRACE_S, heartbeat or not (a hung tool).
When its run is cancelled, the beat finds the row no longer running and
cancels the tool's context: the executor stops waiting, and the tool stops at
its next `emit_progress`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings

from chat.engine.lease import RowHeartbeat
from chat.models import ExecutionStatus, ToolExecution
from tools.context import ToolContext
from tools.registry import registry as tool_registry


def tool_deadline(execution: ToolExecution) -> float:
    """Seconds after its start when a running call is past its tool's time, with grace."""
    spec = tool_registry.get(execution.name)
    return (spec.timeout if spec else 60.0) + settings.TOOLCHAT_TOOL_GRACE_S


def call_dead_in(execution: ToolExecution, now: datetime, *, grace_left: float) -> float:
    """Seconds until a running call is presumed dead with its worker (<= 0: it is).

    `grace_left` is `restart_grace_left(now)`: a silence is not a death while
    the database has only just come back.
    """
    started = execution.started_at or now
    by_deadline = tool_deadline(execution) - (now - started).total_seconds()
    if execution.heartbeat_at is None:
        return by_deadline
    by_heartbeat = settings.TOOLCHAT_RUN_STALE_S - (now - execution.heartbeat_at).total_seconds()
    return min(by_deadline, max(by_heartbeat, grace_left))


class CallHeartbeat(RowHeartbeat):
    """Renews a running call's `heartbeat_at`; cancels its tool once the call is not running."""

    def __init__(self, execution_id: Any, context: ToolContext) -> None:
        rows = ToolExecution.objects.filter(pk=execution_id, status=ExecutionStatus.RUNNING)
        super().__init__(rows, context.cancel, f"tool call {execution_id}")
