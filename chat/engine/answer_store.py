"""Storing a model step's answer: the assistant message, its tool calls' audit rows, the run.

A model step (chat/engine/model_step.py) ends here once its call has
answered: in one transaction under the run's lease, the assistant message
(its tool calls repaired and their ids made storable), a ToolExecution per
call (waiting for approval where the tool asks it), the ModelCall's result
and the run's counters; then what the run loop does next (`StepOutcome`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
from typing import Any

from django.db import IntegrityError, transaction

from chat.engine.answer_plan import AnswerPlan, StepOutcome, answer_plan
from chat.engine.call_records import execution_build
from chat.engine.call_repair import repaired_tool_calls, storable_call_ids
from chat.engine.dispatch import dispatch_tool
from chat.engine.finish import RunEnd, run_end
from chat.engine.ledger import (
    assistant_message_create,
    call_answer_store,
    call_denied,
    call_for_client,
    call_held,
    call_standing_approved,
    call_start,
    model_call_answer_store,
    model_call_failed,
    model_call_figures,
    run_approval_wait,
    run_write,
    tools_ended,
)
from chat.engine.step_context import StepContext
from chat.live.event_types import Event
from chat.live.events import events_publish
from chat.llm.base import (
    Completion,
)
from chat.models import (
    ExecutionStatus,
    Message,
    ModelCall,
    ModelCallPurpose,
    Run,
    ToolExecution,
)
from chat.policies import calls_judged
from chat.statements import row_insert
from tools.results import denied_result

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Step:
    """A model step's outcome, with the answer and the audit rows of its calls."""

    outcome: StepOutcome
    message: Message | None = None
    executions: list[ToolExecution] = dataclasses.field(default_factory=list)
    # The tool messages stored with the answer: the refusals of calls a policy denied.
    answers: list[Message] = dataclasses.field(default_factory=list)


def answer_store(
    context: StepContext, model_call: ModelCall, completion: Completion, *, deltas: list[Event]
) -> Step:
    """Store the answer, its ModelCall, its calls' audit rows and the step's events, at once.

    `context` is what the step read at its start (chat/engine/step_context.py):
    the run and its lease, where the answer goes, the policies its calls are
    held to, the tools' follow-ups a final answer keeps.

    Without tool calls the answer ends the run. One call is marked running by
    this worker, which runs it next; several are queued on commit and the run
    releases its lease to them. A call id another conversation stored already
    is found by the insert itself (it is unique), and the step is stored again
    with fresh ids for those.
    """
    completion = storable_call_ids(completion)
    offered = model_call.purpose in (ModelCallPurpose.TOOLS, ModelCallPurpose.DECIDE)
    if completion.tool_calls and not offered:
        logger.warning("run %s: ignored tool calls in a call that offered no tools", context.run.pk)
    taken: set[str] = set()
    while True:
        calls = repaired_tool_calls(completion, taken=taken) if offered else []
        try:
            return _answer_write(context, model_call, completion, calls, deltas=deltas)
        except IntegrityError:
            ids = [call.id for call in completion.tool_calls if call.id]
            reused = set(
                ToolExecution.objects.filter(tool_call_id__in=ids).values_list(
                    "tool_call_id", flat=True
                )
            )
            if not reused - taken:
                raise
            taken |= reused


# What `_answer_write` may change on the run (run_write sets them on the object).
_RUN_WRITTEN = (
    "model_calls",
    "steps",
    "lease",
    "status",
    "finished_at",
    "latency_ms",
    "heartbeat_at",
)


def _answer_write(
    context: StepContext,
    model_call: ModelCall,
    completion: Completion,
    calls: list[dict[str, Any]],
    *,
    deltas: list[Event],
) -> Step:
    run, token, suggestions = context.run, context.token, context.suggestions
    if not calls and not (completion.content or "").strip():
        return _answer_empty(run, token, model_call, completion)
    judged = calls_judged(run, context.policies, calls, theirs=context.theirs)
    plan = answer_plan(context, calls, judged)
    before = {name: getattr(run, name) for name in _RUN_WRITTEN}
    answers: list[Message] = []  # the refusals stored with the answer
    answer = functools.partial(
        _answer_rows,
        run,
        model_call,
        completion,
        plan,
        position=context.position,
        deltas=deltas,
        answers=answers,
    )
    fields = plan.fields
    try:
        if plan.ending:
            end = RunEnd.completed(model_call.pk)
            with run_end(run, end, lease=token, counters=fields) as events:
                message, executions = answer(events=events, suggestions=suggestions)
        else:
            with transaction.atomic():
                if plan.held:
                    # Nobody holds a run that waits for a person: a decision moves it on.
                    run_approval_wait(run, token, **fields)
                else:
                    run_write(run, token, **fields)
                events = []
                message, executions = answer(events=events, suggestions=suggestions)
                if not plan.inline:
                    for execution in executions:
                        if execution.status == ExecutionStatus.PENDING:
                            transaction.on_commit(functools.partial(dispatch_tool, execution.pk))
                events_publish(run=run, events=events)
    except IntegrityError:
        for name, value in before.items():  # undo the rolled-back write on the object too
            setattr(run, name, value)
        raise
    return Step(plan.outcome, message, executions, answers)


def _answer_empty(
    run: Run, token: uuid.UUID, model_call: ModelCall, completion: Completion
) -> Step:
    """An answer with no text and no calls: the call is recorded as failed, to be asked again.

    A final answer must say something: the run loop asks again (or falls back
    to the tools' own messages).
    """
    logger.warning("run %s: the model answered with no text", run.pk)
    run_write(run, token, model_calls=run.model_calls + 1)
    model_call_figures(model_call, completion)
    model_call_failed(model_call, "The model answered with no text.", attempts=completion.attempts)
    return Step(StepOutcome.EMPTY)


def _answer_rows(
    run: Run,
    model_call: ModelCall,
    completion: Completion,
    plan: AnswerPlan,
    *,
    position: int,
    deltas: list[Event],
    suggestions: list[str],
    events: list[Event],
    answers: list[Message],
) -> tuple[Message, list[ToolExecution]]:
    """Store the answer, its ModelCall and its calls' audit rows; append the step's events.

    The caller holds the run's row lock (its lease checked), in the
    transaction that commits them.
    """
    calls = plan.calls
    message, completed = assistant_message_create(
        run=run,
        message_id=model_call.pk,
        position=position,
        content=completion.content if (completion.content or calls) else "",
        tool_calls=calls or None,
        # A final answer carries its tools' follow-ups (chat/engine/suggestions.py).
        suggestions=None if calls else suggestions or None,
        cost_usd=model_call.cost_usd,
        **answer_figures(completion),
    )
    model_call_answer_store(model_call, message)  # filled by chat/engine/model_calls.py
    executions = [
        execution_build(run=run, message=message, call=call, step=run.steps) for call in calls
    ]
    events += [*deltas, completed]
    for execution, call in zip(executions, calls, strict=True):
        verdict = plan.verdicts.get(call["id"])
        if verdict is not None:
            execution.policy_decision, execution.policy_rule = verdict.decision, verdict.rule
        if call["id"] in plan.standing:
            call_standing_approved(execution, plan.standing[call["id"]])
        if call in plan.client:
            call_for_client(execution)
        elif call in plan.denied:
            call_denied(execution, verdict.reason() if verdict else "")
        elif call in plan.held:
            events.append(call_held(execution))
        elif plan.inline:
            events.append(call_start(execution))
    if len(executions) == 1:
        row_insert(executions[0])
    else:
        ToolExecution.objects.bulk_create(executions)
    answers.extend(_refusals_store(run, message, executions, plan, events))
    return message, executions


def _refusals_store(
    run: Run,
    message: Message,
    executions: list[ToolExecution],
    plan: AnswerPlan,
    events: list[Event],
) -> list[Message]:
    """Answer the calls a policy refused, in the answer's transaction; their tool messages.

    Their events go to `events`. When every call of ours was refused, the
    step's tools have ended with the answer.
    """
    answers: list[Message] = []
    for execution, call in zip(executions, plan.calls, strict=True):
        if call in plan.denied:
            refusal = denied_result(
                execution.name, execution.decision_reason, tool_call_id=execution.tool_call_id
            )
            answered = call_answer_store(run, execution, refusal)
            if answered is not None:
                answers.append(answered[0])
                events.append(answered[1])
    if plan.answered:
        events.append(tools_ended(message.pk))
    return answers


def answer_figures(completion: Completion) -> dict[str, Any]:
    """What an answer's message keeps of the completion that wrote it, besides its text."""
    return {
        "latency_ms": completion.latency_ms,
        "model": completion.model,
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": completion.completion_tokens,
        "finish_reason": completion.finish_reason,
        # Kept for the reader and the audit; history_rows never reads it back to a model.
        "reasoning": completion.reasoning or "",
    }
