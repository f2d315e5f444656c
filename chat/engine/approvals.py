"""Approvals: which calls wait for a person, what they are asked, and the decision stored.

A call of a tool with `requires_approval` (always, or by a rule of its
arguments) is stored `awaiting_approval` with its step, and its run waits as
`awaiting_approval`, holding no worker, thread or connection. The owner's
decision (chat/services/approvals.py), or the sweep's expiry, is stored here:
approved, the call is queued like any other; rejected, it is answered with the
rejection. The step's latch then moves the run on as for any result.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from chat.engine.dispatch import dispatch_tool
from chat.engine.ledger import (
    call_answer_store,
    call_decided,
    message_calls_rewrite,
    run_decided,
)
from chat.engine.replay_tools import call_arguments
from chat.engine.tool_calls import call_lock, latch_release
from chat.live.event_types import Event
from chat.live.events import events_publish
from chat.models import ExecutionStatus, Run, RunStatus, StandingApproval, ToolExecution
from chat.policies import arguments_digest
from tools.audit import arguments_for_audit
from tools.results import rejected_result

logger = logging.getLogger(__name__)


def approval_store(
    run: Run,
    execution: ToolExecution,
    *,
    user: Any,
    approve: bool,
    reason: str,
    arguments: dict[str, Any] | None = None,
    standing: Standing | None = None,
) -> None:
    """Store a person's decision on a waiting call (both rows locked by the caller).

    With `standing`, an approval is also a standing approval of the call's tool in
    its conversation (for any arguments, or for these), recorded on the call.

    Approved, the call is queued like any other, with `arguments` when the
    person changed the model's (validated by the caller): the history then has
    the call as it ran, and the audit row keeps both. Rejected, it is answered
    with the rejection, which the model reads. When no call of the run waits
    any more, the run is working again, and the step's latch moves it on once
    every call has its answer.
    """
    now = timezone.now()
    approved = _call_rewritten(execution, arguments) if approve and arguments is not None else None
    made = None
    if approve and standing is not None:
        made = _standing_approval_create(run, execution, user, standing, approved=approved)
    decided = call_decided(
        execution,
        user=user,
        at=now,
        reason=reason,
        approve=approve,
        approved_arguments=approved,
        standing_approval=made,
    )
    events: list[Event] = [decided]
    if approve:
        transaction.on_commit(functools.partial(dispatch_tool, execution.pk))
    else:
        result = rejected_result(execution.name, reason, tool_call_id=execution.tool_call_id)
        answered = call_answer_store(run, execution, result)  # it waited: not answered yet
        if answered is not None:
            events.append(answered[1])
    waiting = ToolExecution.objects.filter(run=run, status=ExecutionStatus.AWAITING_APPROVAL)
    if run.status == RunStatus.AWAITING_APPROVAL and not waiting.exists():
        # The run waited from its step's calls' storing (together, in one answer) to
        # this last decision: people's time, kept apart from toolchat's own.
        waited = max(0, int((now - execution.created_at).total_seconds() * 1000))
        run.approval_wait_ms = (run.approval_wait_ms or 0) + waited
        run_decided(run, at=now)
    events += latch_release(run, execution.message_id)
    events_publish(run=run, events=events)


def _call_rewritten(execution: ToolExecution, arguments: dict[str, Any]) -> Any:
    """Give the call the approved arguments in the history; their audit form, None if the same.

    The assistant message's `tool_calls` is what later model calls read and
    what the tool runs with (chat/engine/replay_tools.py `call_arguments`), so
    the model sees the call as it ran; `arguments` on the audit row stays the
    model's, and `approved_arguments` (the value returned, masked alike, which
    the ledger writes with the decision) says what ran.
    """
    sent = call_arguments(execution)
    try:
        unchanged = json.loads(sent) == arguments
    except ValueError:
        unchanged = False
    if unchanged:
        return None
    text = json.dumps(arguments, ensure_ascii=False)
    message = execution.message
    message_calls_rewrite(
        message,
        [
            {**call, "function": {**call["function"], "arguments": text}}
            if call.get("id") == execution.tool_call_id
            else call
            for call in message.tool_calls or []
        ],
    )
    return arguments_for_audit(execution.name, text)[0]


@dataclasses.dataclass(frozen=True)
class Standing:
    """An approval that stands for the conversation: for any arguments, or for these only."""

    match_arguments: bool = False


def _standing_approval_create(
    run: Run, execution: ToolExecution, user: Any, standing: Standing, *, approved: Any
) -> StandingApproval:
    """Say yes to the call's tool in its conversation, for any arguments or for these.

    With `match_arguments`, the arguments it ran with (the approved ones, else the
    model's) are kept as a digest, and shown masked.
    """
    digest, shown = "", None
    if standing.match_arguments:
        try:
            ran = json.loads(call_arguments(execution))
        except ValueError:
            ran = None
        digest = arguments_digest(ran)
        shown = approved or execution.approved_arguments or execution.arguments
    return StandingApproval.objects.create(
        conversation_id=run.conversation_id,
        tool=execution.name,
        arguments=shown,
        arguments_digest=digest,
        created_by=user,
        created_from=execution,
    )


def approvals_expire() -> list[Any]:
    """Reject, with the reason "expired", every call that waited for a decision too long.

    TOOL_APPROVAL_TIMEOUT_S after the call was stored; the model reads the
    rejection and the run goes on to an answer. Returns the calls' ids.
    """
    cutoff = timezone.now() - timedelta(seconds=settings.TOOL_APPROVAL_TIMEOUT_S)
    expired = list(
        ToolExecution.objects.filter(
            status=ExecutionStatus.AWAITING_APPROVAL, created_at__lt=cutoff
        ).values_list("pk", flat=True)
    )
    for execution_id in expired:
        with transaction.atomic():
            run, execution = call_lock(ToolExecution.objects.all(), execution_id)
            if execution.status != ExecutionStatus.AWAITING_APPROVAL:
                continue  # decided meanwhile
            approval_store(run, execution, user=None, approve=False, reason="expired")
        logger.info("tool call %s waited too long for approval; rejected", execution_id)
    return expired
