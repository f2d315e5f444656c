"""Approvals through the Responses API: `mcp_approval_response` items decide the calls that wait.

A call of toolchat's that needs a person's approval ends its response with an
`mcp_approval_request` item (`mcpr_` and the call's id; chat/openai_api/
response_output.py). The next request, with `previous_response_id`, answers
each with an `mcp_approval_response` (`approval_request_id`, `approve`,
`reason`), and nothing else: every waiting call is decided, through the same
durable approval as the REST API's and the chat page's
(chat/services/approvals.py), and the run goes on. That request's response
is a part of the run (`resp_<run>_<n>`): what the run did after the
decisions. A call that does not wait (any more) is a 409; an id that names
no call of the response is a 400.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from django.db import transaction
from django.utils import timezone

from chat.exceptions import Conflict, InvalidInput
from chat.models import Conversation, ExecutionStatus, Run, ToolExecution
from chat.openai_api.response_items import INPUT_ITEMS, input_items_read
from chat.openai_api.response_output import PARTS, PRIVATE, response_parts
from chat.services.approvals import MAX_REASON_CHARS, tool_call_decide

APPROVAL_PREFIX = "mcpr_"


@dataclasses.dataclass(frozen=True)
class Decision:
    """One `mcp_approval_response` item, read: the call it decides, and how."""

    execution_id: uuid.UUID
    approve: bool
    reason: str
    where: str  # the item, as the request names it (`input[0]`)


def decision_read(item: dict[str, Any], where: str) -> Decision:
    """An `mcp_approval_response` item checked; InvalidInput names its field at fault."""
    value = item.get("approval_request_id")
    execution_id = None
    if isinstance(value, str) and value.startswith(APPROVAL_PREFIX):
        try:
            execution_id = uuid.UUID(hex=value.removeprefix(APPROVAL_PREFIX))
        except ValueError:
            execution_id = None
    if execution_id is None:
        raise InvalidInput(
            f"{where}.approval_request_id must be the id of an mcp_approval_request item "
            f"({APPROVAL_PREFIX}...).",
            field=f"{where}.approval_request_id",
        )
    approve = item.get("approve")
    if not isinstance(approve, bool):
        raise InvalidInput(f"{where}.approve must be true or false.", field=f"{where}.approve")
    reason = item.get("reason") or ""
    if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS:
        raise InvalidInput(
            f"{where}.reason must be a string of at most {MAX_REASON_CHARS} characters.",
            field=f"{where}.reason",
        )
    return Decision(execution_id, approve, reason, where)


def decisions_apply(
    user: Any, run: Run, decisions: list[Decision], *, echo: dict[str, Any], store: bool, raw: Any
) -> tuple[int, int]:
    """Decide the run's waiting calls and begin the response that follows them.

    In one transaction: every call that waits must be decided, each once; the
    new part is recorded from just before the decisions. Returns the part's
    number and the conversation's event cursor from which its events are new.
    """
    with transaction.atomic():
        cursor = (
            Conversation.objects.filter(pk=run.conversation_id)
            .values_list("last_event_seq", flat=True)
            .get()
        )
        since = timezone.now()
        calls = dict(ToolExecution.objects.filter(run=run).values_list("pk", "status"))
        for decision in decisions:
            _decidable_check(decision, calls)
        named = {decision.execution_id for decision in decisions}
        waiting = [pk for pk, state in calls.items() if state == ExecutionStatus.AWAITING_APPROVAL]
        missing = [f"{APPROVAL_PREFIX}{pk.hex}" for pk in waiting if pk not in named]
        if missing:
            raise InvalidInput(
                f"input must decide every call that waits: {', '.join(missing)} also waits "
                "for an mcp_approval_response.",
                field="input",
            )
        for decision in decisions:
            tool_call_decide(
                execution_id=decision.execution_id,
                user=user,
                approve=decision.approve,
                reason=decision.reason,
                conversation_id=run.conversation_id,
            )
        locked = Run.objects.select_for_update(of=("self",)).get(pk=run.pk)
        stored = dict(locked.response or {})
        parts = response_parts(locked)
        items = input_items_read(raw, run, len(parts) + 1)
        parts.append(
            {"since": since.isoformat(), "echo": echo, "stored": store, INPUT_ITEMS: items}
        )
        Run.objects.filter(pk=run.pk).update(response={**stored, PARTS: parts})
    return len(parts), int(cursor)


def continued_echo(run: Run, previous: str, store: bool) -> dict[str, Any]:
    """What the part echoes: the turn's request (its options are the turn's), continued."""
    first = {key: value for key, value in (run.response or {}).items() if key not in PRIVATE}
    return {**first, "previous_response_id": previous, "store": store}


def _decidable_check(decision: Decision, calls: dict[uuid.UUID, str]) -> None:
    shown = f"{APPROVAL_PREFIX}{decision.execution_id.hex}"
    state = calls.get(decision.execution_id)
    if state is None:
        raise InvalidInput(
            f"{decision.where}.approval_request_id: {shown} is not an approval request of "
            "previous_response_id.",
            field=f"{decision.where}.approval_request_id",
        )
    if state != ExecutionStatus.AWAITING_APPROVAL:
        raise Conflict(
            f"{shown} is not waiting for a decision: the call is {state}.",
            details={"approval_request_id": shown, "status": state},
        )
