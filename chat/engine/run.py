"""The run loop: claim the run, find where it stands, do the next thing, until it parks or ends."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import Any

from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from chat.engine.continuation import Action, Decision, decide_after_tools, direct_reply
from chat.engine.finish import RunEnd, run_end, run_fail
from chat.engine.lease import LeaseLost, run_claim, run_recheck_later
from chat.engine.model_calls import interrupted_call_record
from chat.engine.model_step import (
    StepOpening,
    StepOutcome,
    assistant_message_create,
    model_step,
    step_open,
)
from chat.engine.request import history_load
from chat.engine.suggestions import (
    model_suggestions_ask,
    model_suggestions_wanted,
    model_suggestions_write,
    tool_suggestions,
)
from chat.engine.tool_calls import run_park, tool_call_run
from chat.live.events import event_publish
from chat.models import (
    FINISHED_EXECUTION_STATUSES,
    Message,
    Mode,
    ModelCallPurpose,
    Role,
    Run,
    RunEvent,
    RunStatus,
    ToolExecution,
)
from tools.registry import registry as tool_registry

logger = logging.getLogger(__name__)

_PURPOSES = {
    Action.CALL_WITH_TOOLS: ModelCallPurpose.TOOLS,
    Action.DECIDE: ModelCallPurpose.DECIDE,
    Action.COMPOSE: ModelCallPurpose.COMPOSE,
}


def run_advance(*, run_id: Any) -> None:
    """Do whatever the run needs next, as the database says; safe to call twice."""
    claim = run_claim(run_id=run_id)
    if claim is None:
        run_recheck_later(run_id=run_id)
        return
    run, token = claim.run, claim.token
    try:
        if claim.first:
            # Nothing stored yet but the user's message: the first model call
            # comes next, and announces the run's start with its own.
            position = _first_position(run)
            started = [("run.started", {"mode": run.mode})]
            _advance(run, token, last=None, executions=[], position=position, announce=started)
        else:
            _resume(run, token)
    except LeaseLost:
        logger.info("run %s: lease lost (cancelled or taken over); stopping", run.pk)
    except Exception as exc:
        logger.exception("run %s failed with an internal error", run.pk)
        run_fail(run, token, f"Internal error while processing the run ({type(exc).__name__}).")
        return


def _first_position(run: Run) -> int:
    """Where the run's first answer goes: after the conversation's last message.

    That is after its user message, or for a regenerated answer after the
    superseded answer it replaces. `run_claim` reads the position with the run.
    """
    last = getattr(run, "last_position", None)
    if last is None:
        last = Message.objects.filter(conversation_id=run.conversation_id).aggregate(
            m=Max("position")
        )["m"]
    return 0 if last is None else last + 1


def _resume(run: Run, token: uuid.UUID) -> None:
    """Take over a run someone worked on before: repair what they left, then go on."""
    # Holding the lease, no other model call of this run is in flight: one
    # announced but not stored belonged to a worker that died.
    interrupted_call_record(run)
    if not RunEvent.objects.filter(run=run, type="run.started").exists():
        event_publish(run=run, type="run.started", data={"mode": run.mode})
    last = (
        Message.objects.filter(run=run, role=Role.ASSISTANT)
        .order_by("-position")
        .only("id", "position", "tool_calls", "content", "run_id")
        .first()
    )
    if last is None:
        _advance(run, token, last=None, executions=[], position=_first_position(run))
        return
    if not last.tool_calls:
        _answer_finish(run, token, last)  # answered, then its worker died
        return
    executions = list(ToolExecution.objects.filter(message=last))
    _advance(run, token, last=last, executions=executions, position=_after(last))


def _after(message: Message) -> int:
    """The position after an assistant message and the answers to its calls."""
    return message.position + len(message.tool_calls or []) + 1


@dataclasses.dataclass(frozen=True)
class _Next:
    """What follows a step's tool calls: the decision, and the model step it opens (if any)."""

    decision: Decision
    opening: StepOpening | None  # None for a direct reply
    announced: bool = False  # its message.created went out with the last tool result


def _next_step(run: Run, model: str, executions: list[ToolExecution]) -> _Next:
    """Decide what follows the calls of `executions`; it does not depend on their results."""
    specs = [tool_registry.get(e.name) for e in executions]
    decision = decide_after_tools(
        mode=run.mode,
        steps_done=run.steps,
        max_steps=run.conversation.max_steps,
        return_direct=any(spec is not None and spec.return_direct for spec in specs),
        model=model,
    )
    if decision.action == Action.DIRECT:
        return _Next(decision, None)
    purpose = _PURPOSES[decision.action]
    return _Next(decision, step_open(run, purpose=purpose, model=decision.model or model))


def _advance(
    run: Run,
    token: uuid.UUID,
    *,
    last: Message | None,
    executions: list[ToolExecution],
    position: int,
    announce: list[tuple[str, dict[str, Any]]] | None = None,
) -> None:
    """The loop: `last` is the run's newest answer (None before the first), with its calls."""
    model = run.conversation.model or settings.LLM_MODEL
    rows: list[Message] | None = None  # the history, read once, then kept up to date
    following: _Next | None = None  # decided before the last call ran, when this worker ran it
    empty = 0  # answers with no text in a row (one is asked again)
    while True:
        if last is None:
            first = ModelCallPurpose.DECIDE if run.mode == Mode.LLM else ModelCallPurpose.TOOLS
            if rows is None:
                rows = history_load(run)
            opening = step_open(run, purpose=first, model=model)
            step = model_step(
                run, token, opening, position=position, rows=rows, announce=announce or ()
            )
            announce = None
        else:
            if following is None:
                unfinished = [e for e in executions if e.status not in FINISHED_EXECUTION_STATUSES]
                if unfinished:
                    if run_park(run, token, unfinished):
                        return
                    executions = list(ToolExecution.objects.filter(message=last))
                    continue
                following = _next_step(run, model, executions)
            if following.opening is None:
                _direct_step(run, token, last, position=position)
                return
            if rows is None:
                rows = history_load(run)
            step = model_step(
                run,
                token,
                following.opening,
                instruction=following.decision.instruction,
                position=position,
                rows=rows,
                announce=None if following.announced else (),
            )
        if step.outcome == StepOutcome.EMPTY:
            empty += 1
            if empty == 1:
                if following is not None and following.opening is not None:
                    opening = following.opening
                    again = step_open(run, purpose=opening.purpose, model=opening.model)
                    following = dataclasses.replace(following, opening=again, announced=False)
                continue  # ask once more
            if last is not None:
                _direct_step(run, token, last, position=position)  # the tools' own messages
            else:
                run_fail(run, token, "The model answered with no text, twice. Try again.")
            return
        empty = 0
        if step.outcome == StepOutcome.ANSWERED and run.status == RunStatus.RUNNING:
            assert step.message is not None
            _answer_finish(run, token, step.message, rows)
        if step.outcome != StepOutcome.CALLS:
            return  # answered (the run is completed), parked on its calls, or failed
        assert step.message is not None
        rows.append(step.message)
        # The next step is known before the call runs, so its message.created goes
        # out with the call's result, in the same transaction.
        following = _next_step(run, model, step.executions)
        ahead = [following.opening.event()] if following.opening is not None else []
        for execution in step.executions:
            rows.append(tool_call_run(run, token, execution, announce=ahead))
        following = dataclasses.replace(following, announced=bool(ahead))
        last, executions, position = step.message, step.executions, _after(step.message)


def _answer_finish(
    run: Run, token: uuid.UUID, final: Message, rows: list[Message] | None = None
) -> None:
    """Complete a run whose final answer is stored: the model's follow-ups first, if wanted.

    The turn's latency ends at its answer. The follow-ups are stored with the
    completion, in one transaction that first checks the lease: a run
    cancelled during the call stores and announces none of them.
    """
    end = RunEnd.completed(final.pk, at=timezone.now())
    wanted = model_suggestions_wanted(run)
    suggested = (
        model_suggestions_ask(run=run, token=token, final=final, rows=rows) if wanted else None
    )
    with run_end(run, end, lease=token) as events:
        if wanted:
            events += model_suggestions_write(run=run, final=final, suggested=suggested)


def _direct_step(run: Run, token: uuid.UUID, last: Message, *, position: int) -> None:
    """End the turn with the tools' own messages: no further model call."""
    order = {call["id"]: index for index, call in enumerate(last.tool_calls or [])}
    answers = sorted(
        Message.objects.filter(run=run, role=Role.TOOL, tool_call_id__in=list(order)),
        key=lambda m: order.get(m.tool_call_id or "", 0),
    )
    text = direct_reply([answer.content or "" for answer in answers])
    message_id = uuid.uuid4()
    with run_end(run, RunEnd.completed(message_id), lease=token) as events:
        _, completed = assistant_message_create(
            run=run,
            message_id=message_id,
            position=position,
            content=text,
            finish_reason="direct",
            suggestions=tool_suggestions({"role": "tool", "content": a.content} for a in answers)
            or None,
        )
        events += [
            (
                "message.created",
                {"message_id": str(message_id), "role": "assistant", "purpose": "direct"},
            ),
            ("message.delta", {"message_id": str(message_id), "text": text}),
            completed,
        ]
