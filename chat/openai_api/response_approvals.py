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

A stateless client (the agents SDK by default) sends no `previous_response_id`
but the whole history: its input, the `mcp_approval_request` items and, at its
end, the `mcp_approval_response` items. Those closing answers name the run
themselves (`decisions_of_history`) and decide it as above.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from django.db import transaction
from django.utils import timezone

from chat.exceptions import Conflict, InvalidInput, NotFound
from chat.models import Conversation, ExecutionStatus, Run, ToolExecution
from chat.openai_api.response_items import INPUT_ITEMS, input_items_read
from chat.openai_api.response_output import DELETED, PARTS, PRIVATE, response_parts
from chat.services.approvals import MAX_REASON_CHARS, tool_call_decide

APPROVAL_PREFIX = "mcpr_"


class ApprovalRequestNotFound(NotFound):
    """No call of the user's that an approval request's id names (404, as another user's is)."""


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
        # A turn not stored as a response stays so (its parts are their own).
        stored = dict(locked.response or {DELETED: True})
        parts = response_parts(locked)
        items = input_items_read(raw, run, len(parts) + 1)
        parts.append(
            {"since": since.isoformat(), "echo": echo, "stored": store, INPUT_ITEMS: items}
        )
        Run.objects.filter(pk=run.pk).update(response={**stored, PARTS: parts})
    return len(parts), int(cursor)


def decisions_of_history(user: Any, decisions: list[Decision]) -> tuple[Run, list[Decision]]:
    """The run a stateless history's closing answers go on with, and those that decide.

    Each answer must name a call of the user's (another user's is a 404, as one that
    does not exist). An answer to a call decided before is history the client resends
    (a run that paused twice); if no answer's call waits, the decision was made
    already, a 409, as with `previous_response_id`. The calls that wait must be of
    one run.
    """
    calls = {
        pk: (run_id, state)
        for pk, run_id, state in ToolExecution.objects.filter(
            pk__in=[decision.execution_id for decision in decisions],
            run__conversation__owner=user,
        ).values_list("pk", "run_id", "status")
    }
    for decision in decisions:
        if decision.execution_id not in calls:
            shown = f"{APPROVAL_PREFIX}{decision.execution_id.hex}"
            raise ApprovalRequestNotFound(
                f"No approval request with id {shown!r} was found.",
                field=f"{decision.where}.approval_request_id",
            )
    deciding = [
        d for d in decisions if calls[d.execution_id][1] == ExecutionStatus.AWAITING_APPROVAL
    ]
    if not deciding:
        shown = f"{APPROVAL_PREFIX}{decisions[-1].execution_id.hex}"
        state = calls[decisions[-1].execution_id][1]
        raise Conflict(
            f"{shown} is not waiting for a decision: the call is {state}. The history's "
            "answers were decided; send it with the next message to go on.",
            details={"approval_request_id": shown, "status": state},
        )
    runs = {calls[decision.execution_id][0] for decision in deciding}
    if len(runs) > 1:
        raise InvalidInput(
            f"{deciding[-1].where}: input answers the approval requests of two responses; "
            "answer one response's at a time.",
            field=deciding[-1].where,
        )
    return Run.objects.select_related("conversation").get(pk=runs.pop()), deciding


def continued_echo(
    run: Run, previous: str | None, store: bool, asked: dict[str, Any]
) -> dict[str, Any]:
    """What the part echoes: the turn's request (its options are the turn's), continued.

    A turn whose response was not stored (`store: false`) kept no echo: the part
    shows what its own request (`asked`) said.
    """
    first = {key: value for key, value in (run.response or {}).items() if key not in PRIVATE}
    return {**(first or asked), "previous_response_id": previous, "store": store}


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
