"""Deciding tool calls that wait for a person: approve (as asked, or with other arguments,
once or for the conversation) or reject; and withdrawing a standing approval.

Every decision is the run owner's, on a call that still waits, once; the
engine stores it (chat/engine/approvals.py). docs/governance.md says what
each choice does.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from chat.engine.approvals import Standing, approval_store
from chat.engine.replay_tools import call_arguments
from chat.engine.tool_calls import call_lock
from chat.exceptions import Conflict, InvalidInput, NotFound, ToolExecutionNotFound
from chat.models import ExecutionStatus, Run, StandingApproval, ToolExecution
from chat.timestamps import iso_time
from tools.arguments import ArgumentsInvalid
from tools.audit import MASK
from tools.registry import registry as tool_registry

MAX_REASON_CHARS = 2000
SCOPES = ("call", "conversation")


def tool_call_decide(
    *,
    execution_id: uuid.UUID | str,
    user: AbstractBaseUser | AnonymousUser,
    approve: bool,
    reason: str = "",
    conversation_id: uuid.UUID | str | None = None,
    arguments: Any = None,
    scope: str = "call",
    match_arguments: bool = False,
) -> ToolExecution:
    """Decide a waiting call of the user's own run, once; the run goes on from there.

    An approval may carry other `arguments` (checked against the tool's
    parameters: InvalidInput naming the field) and `scope="conversation"`: a
    standing approval of the tool in the call's conversation, for any
    arguments or, with `match_arguments`, for these. ToolExecutionNotFound for
    a missing call or someone else's (or, with `conversation_id`, one of
    another conversation); Conflict, with the decision already made, for a
    call that does not wait (any more).
    """
    _choices_check(
        approve=approve,
        reason=reason,
        arguments=arguments,
        scope=scope,
        match_arguments=match_arguments,
    )
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
        approved = None if arguments is None else _arguments_checked(execution, arguments)
        approval_store(
            run,
            execution,
            user=user,
            approve=approve,
            reason=reason.strip(),
            arguments=approved,
            standing=Standing(match_arguments) if approve and scope == "conversation" else None,
        )
    return execution


def _choices_check(
    *, approve: bool, reason: Any, arguments: Any, scope: Any, match_arguments: Any
) -> None:
    if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS:
        raise InvalidInput(f"The reason is at most {MAX_REASON_CHARS} characters.", field="reason")
    if scope not in SCOPES:
        raise InvalidInput('The scope is "call" or "conversation".', field="scope")
    if not approve and (arguments is not None or scope != "call"):
        field = "arguments" if arguments is not None else "scope"
        raise InvalidInput("Only an approval takes arguments or a scope.", field=field)
    if arguments is not None and not isinstance(arguments, Mapping):
        raise InvalidInput("The arguments are a JSON object.", field="arguments")
    if not isinstance(match_arguments, bool):
        raise InvalidInput("match_arguments is true or false.", field="match_arguments")


def _arguments_checked(execution: ToolExecution, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The approved arguments, checked as a model's call is; a masked value keeps the model's.

    A sensitive parameter is shown masked (***) to the person deciding: sent
    back as it was shown, it keeps the value the model gave.
    """
    spec = tool_registry.get(execution.name)
    if spec is None:
        raise InvalidInput(
            f"The tool {execution.name} is not registered any more; its arguments cannot be "
            "checked. Approve it as asked, or reject it.",
            field="arguments",
        )
    try:
        sent = json.loads(call_arguments(execution))
    except ValueError:
        sent = None
    given = {
        key: sent[key]
        if value == MASK and key in spec.sensitive and isinstance(sent, dict) and key in sent
        else value
        for key, value in arguments.items()
    }
    try:
        spec.validate_arguments(given)
    except ArgumentsInvalid as exc:
        first = exc.errors[0] if exc.errors else {"field": "", "message": str(exc)}
        field = f"arguments.{first['field']}" if first["field"] else "arguments"
        raise InvalidInput(
            f"{field}: {first['message']}",
            field=field,
            details={"errors": {f"arguments.{e['field']}": [e["message"]] for e in exc.errors}},
        ) from None
    return given


def standing_approval_withdraw(*, conversation_id: Any, approval_id: Any, user: Any) -> None:
    """End a standing approval of the user's conversation: its tool asks again from now on."""
    withdrawn = StandingApproval.objects.filter(
        pk=approval_id,
        conversation_id=conversation_id,
        conversation__owner_id=user.pk,
        withdrawn_at__isnull=True,
    ).update(withdrawn_at=timezone.now())
    if not withdrawn:
        raise NotFound("Standing approval not found.")


def _decision(execution: ToolExecution) -> dict[str, Any]:
    """What was decided about a call (for the 409 of a second decision)."""
    return {
        "execution_id": str(execution.pk),
        "status": execution.status,
        "decided_at": iso_time(execution.decided_at),
        "decided_by": execution.approved_by_id,
        "reason": execution.decision_reason,
    }
