"""The run loop: claim the run, ask the database what comes next, do it, until it parks or ends."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.conf import settings
from django.db import transaction

from chat.engine.continuation import Action, decide_after_tools, direct_reply
from chat.engine.finish import run_complete, run_fail
from chat.engine.lease import LeaseLost, run_claim, run_lock, run_recheck_later
from chat.engine.model_step import StepOutcome, assistant_message_create, model_step
from chat.engine.tool_calls import run_park
from chat.live.events import event_publish
from chat.models import (
    FINISHED_EXECUTION_STATUSES,
    CallStatus,
    Message,
    Mode,
    ModelCall,
    ModelCallPurpose,
    Role,
    Run,
    RunEvent,
    ToolExecution,
)
from tools.registry import registry as tool_registry

logger = logging.getLogger(__name__)


def run_advance(*, run_id: Any) -> None:
    """Do whatever the run needs next, as the database says; safe to call twice."""
    claimed = run_claim(run_id=run_id)
    if claimed is None:
        run_recheck_later(run_id=run_id)
        return
    run, token = claimed
    try:
        # Holding the lease, no other model call of this run is in flight: one
        # still marked running belonged to a worker that died.
        ModelCall.objects.filter(run=run, status=CallStatus.RUNNING).update(
            status=CallStatus.FAILED,
            error="The worker making this call stopped before it finished.",
        )
        if not RunEvent.objects.filter(run=run, type="run.started").exists():
            event_publish(run=run, type="run.started", data={"mode": run.mode})
        _advance(run, token)
    except LeaseLost:
        logger.info("run %s: lease lost (cancelled or taken over); stopping", run.pk)
    except Exception as exc:
        logger.exception("run %s failed with an internal error", run.pk)
        run_fail(run, token, f"Internal error while processing the run ({type(exc).__name__}).")


def _advance(run: Run, token: uuid.UUID) -> None:
    conversation = run.conversation
    model = conversation.model or settings.LLM_MODEL
    while True:
        last = (
            Message.objects.filter(run=run, role=Role.ASSISTANT)
            .order_by("-position")
            .only("id", "tool_calls", "content")
            .first()
        )
        if last is None:
            first = ModelCallPurpose.DECIDE if run.mode == Mode.LLM else ModelCallPurpose.TOOLS
            outcome = model_step(run, token, purpose=first, model=model)
        elif not last.tool_calls:
            run_complete(run, token, last)
            return
        else:
            executions = list(ToolExecution.objects.filter(message=last))
            unfinished = [e for e in executions if e.status not in FINISHED_EXECUTION_STATUSES]
            if unfinished:
                if run_park(run, token, unfinished):
                    return
                continue
            specs = [tool_registry.get(e.name) for e in executions]
            decision = decide_after_tools(
                mode=run.mode,
                steps_done=run.steps,
                max_steps=conversation.max_steps,
                return_direct=any(spec is not None and spec.return_direct for spec in specs),
                model=model,
            )
            if decision.action == Action.DIRECT:
                _direct_step(run, token, last)
                continue
            purpose = {
                Action.CALL_WITH_TOOLS: ModelCallPurpose.TOOLS,
                Action.DECIDE: ModelCallPurpose.DECIDE,
                Action.COMPOSE: ModelCallPurpose.COMPOSE,
            }[decision.action]
            outcome = model_step(
                run,
                token,
                purpose=purpose,
                model=decision.model or model,
                instruction=decision.instruction,
            )
        if outcome != StepOutcome.NEXT:
            return


def _direct_step(run: Run, token: uuid.UUID, last: Message) -> None:
    """End the turn with the tools' own messages: no further model call."""
    order = {call["id"]: index for index, call in enumerate(last.tool_calls or [])}
    answers = sorted(
        Message.objects.filter(run=run, role=Role.TOOL, tool_call_id__in=list(order)),
        key=lambda m: order.get(m.tool_call_id or "", 0),
    )
    text = direct_reply([answer.content or "" for answer in answers])
    message_id = uuid.uuid4()
    event_publish(
        run=run,
        type="message.created",
        data={"message_id": str(message_id), "role": "assistant", "purpose": "direct"},
    )
    event_publish(run=run, type="message.delta", data={"message_id": str(message_id), "text": text})
    with transaction.atomic():
        run_lock(run, token)
        assistant_message_create(
            run=run, message_id=message_id, content=text, finish_reason="direct"
        )
