"""The run loop: claim the run, then do the work of its state until the worker lets go.

The states and what moves a run between them are drawn and tabled in
chat/engine/states.py; this module is the work of each state the loop holds
the run in (`_WORK`): CLAIMED finds where a run taken over stands (repairing
a model call its dead worker left), ASKING and COMPOSING make one model call
(chat/engine/model_step.py), RUNNING_TOOLS runs the step's one call here or
waits for calls running elsewhere and asks the policy what follows
(chat/engine/after_tools.py), DIRECT answers with the tools' messages, and
ANSWERED completes the run after the follow-ups (both ends in chat/engine/turn_complete.py);
FORCED_STEPS is a forced replay's whole turn (chat/engine/forced_replay.py).
Each returns a trigger and `transition` names the next state; the loop stops
where nobody holds the run (parked, awaiting approval) or it ended, always by
chat/engine/finish.py `run_end`.

Every step is stored before the next starts, under the run's lease: a worker
that dies anywhere leaves a run that the next claim resumes from the
database, and one that loses its lease (a cancel, a take-over) stops at its
next write (`LeaseLost`) with nothing written.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from django.db.models import Max

from chat.database import database_unreachable
from chat.engine.after_tools import NextStep, next_step, returns_direct
from chat.engine.answer_plan import StepOutcome
from chat.engine.answer_store import Step
from chat.engine.finish import run_fail
from chat.engine.forced_replay import forced_replay_run
from chat.engine.lease import LeaseLost, run_recheck_later
from chat.engine.ledger import run_budget_warned, run_claim, run_started
from chat.engine.model_calls import interrupted_call_record
from chat.engine.model_step import model_step, step_open
from chat.engine.request import RequestHasher, history_load
from chat.engine.run_limits import run_limit_check
from chat.engine.states import AFTER_TOOLS, Trigger, TurnState, transition, worker_lets_go
from chat.engine.tool_calls import run_park, tool_call_run
from chat.engine.turn_complete import answer_complete, direct_complete
from chat.history import RunHistory
from chat.live.event_types import Event
from chat.live.events import event_publish, events_publish
from chat.llm.endpoints import model_id
from chat.models import (
    FINISHED_EXECUTION_STATUSES,
    ExecutionStatus,
    Message,
    Mode,
    ModelCallPurpose,
    Role,
    Run,
    RunEvent,
    StepSource,
    ToolExecution,
)

logger = logging.getLogger(__name__)


def run_advance(*, run_id: Any) -> None:
    """Do whatever the run needs next, as the database says; safe to call twice."""
    claim = run_claim(run_id=run_id)
    if claim is None:
        run_recheck_later(run_id=run_id)
        return
    run, token = claim.run, claim.token
    turn = _Turn(run, token, first=claim.first, model=model_id(run.conversation.model))
    try:
        _advance(turn)
    except LeaseLost:
        logger.info("run %s: lease lost (cancelled or taken over); stopping", run.pk)
    except Exception as exc:
        if database_unreachable(exc):
            # Not the run's fault: its lease goes stale, and once the database is
            # back the recovery sweep resumes it from its last stored step.
            logger.warning(
                "run %s: the database is unreachable (%s); left to the sweep", run.pk, exc
            )
            return
        logger.exception("run %s failed with an internal error", run.pk)
        run_fail(
            run,
            token,
            f"Internal error while processing the run ({type(exc).__name__}).",
            trigger=Trigger.ERROR,
        )
        return


@dataclasses.dataclass
class _Turn:
    """What the run loop knows of its run between states; the database has the rest."""

    run: Run
    token: uuid.UUID
    first: bool  # claimed before anybody worked on it
    model: str  # the conversation's model
    last: Message | None = None  # the newest answer, while it has tool calls
    executions: list[ToolExecution] = dataclasses.field(default_factory=list)  # its calls
    inline: list[ToolExecution] = dataclasses.field(default_factory=list)  # to run here, now
    position: int = 0  # where the next answer goes
    kept: RunHistory | None = None  # the history, read once, then kept up to date
    hasher: RequestHasher = dataclasses.field(default_factory=RequestHasher)  # its calls' hashes
    following: NextStep | None = None  # what follows the step's calls, once decided
    final: Message | None = None  # the final answer, once stored
    empty: int = 0  # answers with no text in a row (one is asked again)
    announce: list[Event] | None = None  # events before the first step's

    def history(self) -> RunHistory:
        """The conversation's history for the model, read on first use."""
        if self.kept is None:
            self.kept = history_load(self.run)
        return self.kept


def _advance(turn: _Turn) -> None:
    """The loop: do the work of the run's state, move on as the table says, until the worker lets go."""
    state = TurnState.CLAIMED
    while not worker_lets_go(state):
        trigger = _WORK[state](turn)
        following = transition(state, trigger)
        logger.debug("run %s: %s -(%s)-> %s", turn.run.pk, state, trigger, following)
        state = following


def _claimed(turn: _Turn) -> Trigger:
    """Find where the run stands; a run taken over is repaired first."""
    run = turn.run
    if run.sources.steps is StepSource.FORCED:
        return Trigger.FORCED
    if turn.first:
        # Nothing stored yet but the user's message: the first model call
        # comes next, and announces the run's start with its own.
        turn.position = _first_position(run)
        turn.announce = [run_started(run)]
        return Trigger.NEW
    # Holding the lease, no other model call of this run is in flight: one
    # announced but not stored belonged to a worker that died.
    interrupted_call_record(run)
    if not RunEvent.objects.filter(run=run, type="run.started").exists():
        event_publish(run=run, event=run_started(run))
    last = (
        Message.objects.filter(run=run, role=Role.ASSISTANT)
        .order_by("-position")
        .only("id", "position", "tool_calls", "content", "run_id")
        .first()
    )
    if last is None:
        turn.position = _first_position(run)
        return Trigger.NOTHING_ANSWERED
    if not last.tool_calls:
        turn.final = last  # answered, then its worker died
        return Trigger.ANSWER_STORED
    turn.last, turn.position = last, _after(last)
    turn.executions = list(ToolExecution.objects.filter(message=last))
    return Trigger.CALLS_STORED


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


def _after(message: Message) -> int:
    """The position after an assistant message and the answers to its calls."""
    return message.position + len(message.tool_calls or []) + 1


def _model_step(turn: _Turn) -> Trigger:
    """ASKING or COMPOSING: one model call, its answer stored; what it asked for.

    A run over one of its per-run budget limits makes no more calls: it ends
    there, its history whole (every call of its last step is answered).
    """
    run = turn.run
    check = run_limit_check(run)
    if check.fresh:
        events_publish(run=run, events=list(run_budget_warned(run, check.fresh)))
    if check.ended:
        run_fail(run, turn.token, check.ended, trigger=Trigger.LIMIT_REACHED)
        return Trigger.LIMIT_REACHED
    history = turn.history()
    announce: Sequence[Event] | None
    if turn.last is None:
        first = ModelCallPurpose.DECIDE if run.mode == Mode.LLM else ModelCallPurpose.TOOLS
        opening, instruction = step_open(run, purpose=first, model=turn.model), None
        announce, turn.announce = turn.announce or (), None
    else:
        following = turn.following
        assert following is not None
        assert following.opening is not None
        opening, instruction = following.opening, following.decision.instruction
        announce = None if following.announced else ()
    step = model_step(
        run,
        turn.token,
        opening,
        instruction=instruction,
        position=turn.position,
        history=history,
        announce=announce,
        hasher=turn.hasher,
    )
    return _answer_trigger(turn, step)


# A final answer: the run still open (the follow-ups, then the end), or completed with it.
_ANSWER_ENDS = {StepOutcome.ANSWERED: Trigger.ANSWERED, StepOutcome.ENDED: Trigger.COMPLETED}
# Calls that run elsewhere: as tasks, or once a person has decided.
_CALLS_ELSEWHERE = {
    StepOutcome.PARKED: Trigger.CALLS_QUEUED,
    StepOutcome.AWAITING_APPROVAL: Trigger.APPROVAL_ASKED,
}


def _answer_trigger(turn: _Turn, step: Step) -> Trigger:
    """What a model step's outcome means for the turn; the turn takes its answer."""
    if step.outcome == StepOutcome.EMPTY:
        return _no_text(turn)
    turn.empty = 0
    if step.outcome == StepOutcome.FAILED:
        return Trigger.MODEL_FAILED
    assert step.message is not None
    if step.outcome in _ANSWER_ENDS:
        turn.final = step.message
        return _ANSWER_ENDS[step.outcome]
    if step.outcome in _CALLS_ELSEWHERE:
        return _CALLS_ELSEWHERE[step.outcome]
    turn.history().append(step.message)
    for answer in step.answers:
        turn.history().append(answer)
    turn.last, turn.position = step.message, _after(step.message)
    turn.executions = step.executions
    # The call this worker started (none when the policies refused every call of ours).
    turn.inline = [e for e in step.executions if e.status == ExecutionStatus.RUNNING]
    return Trigger.ONE_CALL


def _no_text(turn: _Turn) -> Trigger:
    """An answer with no text: asked once more; twice, the tools' messages answer, or it fails."""
    turn.empty += 1
    if turn.empty == 1:
        following = turn.following
        if turn.last is not None and following is not None and following.opening is not None:
            opening = following.opening
            again = step_open(turn.run, purpose=opening.purpose, model=opening.model)
            turn.following = dataclasses.replace(following, opening=again, announced=False)
        return Trigger.NO_TEXT
    if turn.last is not None:
        return Trigger.NO_TEXT_TWICE_AFTER_TOOLS
    run_fail(
        turn.run,
        turn.token,
        "The model answered with no text, twice. Try again.",
        trigger=Trigger.NO_TEXT_TWICE,
    )
    return Trigger.NO_TEXT_TWICE


def _running_tools(turn: _Turn) -> Trigger:
    """Run the step's one call here, or wait for calls that run elsewhere; then the policy.

    A step that also called a /v1 client's own tools ends the run once ours are
    answered: the client runs its calls, and its next request continues.
    """
    run, token = turn.run, turn.token
    if any(e.status == ExecutionStatus.CLIENT for e in turn.executions):
        for execution in turn.inline:
            turn.history().append(tool_call_run(run, token, execution, announce=()))
        turn.inline = []
        if _calls_wait(turn):
            return Trigger.PARKED
        turn.final = turn.last
        return Trigger.CLIENT_CALLS
    if turn.inline and not returns_direct(turn.inline):
        # The next step is known before the call runs, so its message.created goes
        # out with the call's result, in the same transaction.
        following = next_step(run, turn.model, turn.inline)
        ahead = [following.opening.event()] if following.opening is not None else []
        for execution in turn.inline:
            turn.history().append(tool_call_run(run, token, execution, announce=ahead))
        turn.inline = []
        turn.following = dataclasses.replace(following, announced=bool(ahead))
    elif turn.inline:
        # Whether a return_direct call ends the turn depends on how it went.
        for execution in turn.inline:
            turn.history().append(tool_call_run(run, token, execution, announce=()))
        ran = ToolExecution.objects.filter(pk__in=[e.pk for e in turn.inline])
        turn.inline = []
        turn.following = next_step(run, turn.model, list(ran.only("name", "status", "error")))
    else:
        if _calls_wait(turn):
            return Trigger.PARKED
        turn.following = next_step(run, turn.model, turn.executions)
    return AFTER_TOOLS[turn.following.decision.action]


def _calls_wait(turn: _Turn) -> bool:
    """Park the run while calls of the step run elsewhere (True); False once all are answered."""
    while unfinished := [e for e in turn.executions if e.status not in FINISHED_EXECUTION_STATUSES]:
        if run_park(turn.run, turn.token, unfinished):
            return True
        # The last call finished meanwhile: its wake-up could not claim the run we hold.
        turn.executions = list(ToolExecution.objects.filter(message=turn.last))
    return False


def _direct(turn: _Turn) -> Trigger:
    """End the turn with the tools' own messages: no further model call."""
    assert turn.last is not None
    direct_complete(turn.run, turn.token, turn.last, position=turn.position)
    return Trigger.COMPLETED


def _answered(turn: _Turn) -> Trigger:
    """Complete the run: the model's follow-ups first, if wanted (chat/engine/turn_complete.py)."""
    assert turn.final is not None
    answer_complete(turn.run, turn.token, turn.final, turn.kept)
    return Trigger.COMPLETED


def _forced_steps(turn: _Turn) -> Trigger:
    """A forced replay: the original's steps asked of the model, then the end."""
    done = forced_replay_run(turn.run, turn.token, model=turn.model, first=turn.first)
    return Trigger.COMPLETED if done else Trigger.MODEL_FAILED


# The work of each state the run loop holds the run in.
_WORK: dict[TurnState, Callable[[_Turn], Trigger]] = {
    TurnState.CLAIMED: _claimed,
    TurnState.ASKING: _model_step,
    TurnState.COMPOSING: _model_step,
    TurnState.RUNNING_TOOLS: _running_tools,
    TurnState.DIRECT: _direct,
    TurnState.ANSWERED: _answered,
    TurnState.FORCED_STEPS: _forced_steps,
}
