"""What follows a step's tool calls, all answered: the policy's decision, and the model step it opens.

The continuation policy (chat/engine/continuation.py) decides from the run's
mode and steps, and whether a return_direct tool's call succeeded; this
module reads those off the step's calls and opens the next model step
(chat/engine/model_step.py `step_open`) with the model the decision names.
The run loop (chat/engine/run.py) asks it in RUNNING_TOOLS.
"""

from __future__ import annotations

import dataclasses

from chat.engine.continuation import Action, Decision, decide_after_tools
from chat.engine.model_step import StepOpening, step_open
from chat.models import ExecutionStatus, ModelCallPurpose, Run, ToolExecution
from tools.registry import registry as tool_registry

_PURPOSES = {
    Action.CALL_WITH_TOOLS: ModelCallPurpose.TOOLS,
    Action.DECIDE: ModelCallPurpose.DECIDE,
    Action.COMPOSE: ModelCallPurpose.COMPOSE,
}


@dataclasses.dataclass(frozen=True)
class NextStep:
    """What follows a step's tool calls: the decision, and the model step it opens (if any)."""

    decision: Decision
    opening: StepOpening | None  # None for a direct reply
    announced: bool = False  # its message.created went out with the last tool result


def returns_direct(executions: list[ToolExecution]) -> bool:
    """Whether a call of the step is of a tool whose output ends the turn (return_direct)."""
    return any(
        (spec := tool_registry.get(e.name)) is not None and spec.return_direct for e in executions
    )


def _succeeded(execution: ToolExecution) -> bool:
    """Whether a call worked: it succeeded, or it was served a recorded success (a replay)."""
    if execution.status == ExecutionStatus.REPLAYED:
        return not execution.error
    return execution.status == ExecutionStatus.SUCCEEDED


def next_step(run: Run, model: str, executions: list[ToolExecution]) -> NextStep:
    """Decide what follows the calls of `executions`, which have all been answered.

    Only a return_direct call's own success depends on its result: one that
    failed goes back to the model, which answers (the user never reads a
    model-facing error as the answer).
    """
    decision = decide_after_tools(
        mode=run.mode,
        steps_done=run.steps,
        max_steps=run.conversation.max_steps,
        return_direct=returns_direct([e for e in executions if _succeeded(e)]),
        model=model,
    )
    if decision.action == Action.DIRECT:
        return NextStep(decision, None)
    purpose = _PURPOSES[decision.action]
    # A run on one model (a replay tries its one on the whole turn): LLM_COMPOSE_MODEL writes nothing.
    chosen = model if run.sources.one_model else decision.model or model
    return NextStep(decision, step_open(run, purpose=purpose, model=chosen))
