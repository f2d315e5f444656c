"""Approving or rejecting a tool call that waits for a person (`requires_approval`)."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import ValidationError
from django.db import transaction

from chat.engine.approvals import approval_store
from chat.engine.tool_calls import call_lock
from chat.exceptions import Conflict, InvalidInput, ToolExecutionNotFound
from chat.models import ExecutionStatus, Run, ToolExecution
from chat.timestamps import iso_time

MAX_REASON_CHARS = 2000


def tool_call_decide(
    *,
    execution_id: uuid.UUID | str,
    user: AbstractBaseUser | AnonymousUser,
    approve: bool,
    reason: str = "",
    conversation_id: uuid.UUID | str | None = None,
) -> ToolExecution:
    """Decide a waiting call of the user's own run, once; the run goes on from there.

    ToolExecutionNotFound for a missing call or someone else's (or, with
    `conversation_id`, one of another conversation); Conflict, with the
    decision already made, for a call that does not wait (any more).
    """
    if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS:
        raise InvalidInput(f"The reason is at most {MAX_REASON_CHARS} characters.", field="reason")
    with transaction.atomic():
        # Lock order: the run, then the call (chat/engine/lease.py).
        owned = ToolExecution.objects.filter(run__conversation__owner_id=user.pk)
        if conversation_id is not None:
            owned = owned.filter(run__conversation_id=conversation_id)
        try:
            run, execution = call_lock(owned, execution_id)
        except (Run.DoesNotExist, ValidationError, ValueError):
            raise ToolExecutionNotFound("Tool execution not found.") from None
        if execution.status != ExecutionStatus.AWAITING_APPROVAL:
            raise Conflict(
                "This tool call is not waiting for a decision.", details=_decision(execution)
            )
        approval_store(run, execution, user=user, approve=approve, reason=reason.strip())
    return execution


def _decision(execution: ToolExecution) -> dict[str, Any]:
    """What was decided about a call (for the 409 of a second decision)."""
    return {
        "execution_id": str(execution.pk),
        "status": execution.status,
        "decided_at": iso_time(execution.decided_at),
        "decided_by": execution.approved_by_id,
        "reason": execution.decision_reason,
    }
