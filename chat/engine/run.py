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
Each returns a move (chat/engine/moves.py: its trigger, and what the next
state works on) and `transition` names the next state; the loop stops
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
from collections.abc import Callable
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
from chat.engine.moves import Ask, Direct, Final, Move, Moved, RunTools, StepCalls
from chat.engine.request import RequestHasher, history_load
from chat.engine.run_limits import run_limit_check
from chat.engine.states import AFTER_TOOLS, Trigger, TurnState, transition, worker_lets_go
from chat.engine.tool_calls import run_park, tool_call_run
from chat.engine.turn_complete import answer_complete, direct_complete
from chat.history import RunHistory
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
    """What the run loop keeps of its run across states; each state's work hands on the rest."""

    run: Run
    token: uuid.UUID
    first: bool  # claimed before anybody worked on it
    model: str  # the conversation's model
    kept: RunHistory | None = None  # the history, read once, then kept up to date
    hasher: RequestHasher = dataclasses.field(default_factory=RequestHasher)  # its calls' hashes

    def history(self) -> RunHistory:
        """The conversation's history for the model, read on first use."""
        if self.kept is None:
            self.kept = history_load(self.run)
        return self.kept


def _advance(turn: _Turn) -> None:
    """The loop: do the work of the run's state, move on as the table says, until the worker lets go.

    Each state's work returns a move (chat/engine/moves.py): its trigger, and
    what the next state works on, which the loop hands to it.
    """
    state = TurnState.CLAIMED
    move: Move = Moved(Trigger.CLAIMED)  # the claim led here
    while not worker_lets_go(state):
        move = _WORK[state](turn, move)
        following = transition(state, move.trigger)
        logger.debug("run %s: %s -(%s)-> %s", turn.run.pk, state, move.trigger, following)
        state = following


def _claimed(turn: _Turn, _claim: Move) -> Move:
    """Find where the run stands; a run taken over is repaired first."""
    run = turn.run
    if run.sources.steps is StepSource.FORCED:
        return Moved(Trigger.FORCED)
    if turn.first:
        # Nothing stored yet but the user's message: the first model call
        # comes next, and announces the run's start with its own.
        return Ask(Trigger.NEW, _first_position(run), announce=[run_started(run)])
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
        return Ask(Trigger.NOTHING_ANSWERED, _first_position(run))
    if not last.tool_calls:
        return Final(Trigger.ANSWER_STORED, last)  # answered, then its worker died
    calls = StepCalls(last, list(ToolExecution.objects.filter(message=last)))
    return RunTools(Trigger.CALLS_STORED, calls)


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


def _model_step(turn: _Turn, ask: Move) -> Move:
    """ASKING or COMPOSING: one model call, its answer stored; what it asked for.

    A run over one of its per-run budget limits makes no more calls: it ends
    there, its history whole (every call of its last step is answered).
    """
    assert isinstance(ask, Ask)
    run = turn.run
    check = run_limit_check(run)
    if check.fresh:
        events_publish(run=run, events=list(run_budget_warned(run, check.fresh)))
    if check.ended:
        run_fail(run, turn.token, check.ended, trigger=Trigger.LIMIT_REACHED)
        return Moved(Trigger.LIMIT_REACHED)
    history = turn.history()
    opening = ask.opening
    if opening is None:  # the run's first step
        first = ModelCallPurpose.DECIDE if run.mode == Mode.LLM else ModelCallPurpose.TOOLS
        opening = step_open(run, purpose=first, model=turn.model)
    step = model_step(
        run,
        turn.token,
        opening,
        instruction=ask.instruction,
        position=ask.position,
        history=history,
        announce=ask.announce,
        hasher=turn.hasher,
    )
    return _answer_move(turn, ask, step)


# Calls that run elsewhere: as tasks, or once a person has decided.
_CALLS_ELSEWHERE = {
    StepOutcome.PARKED: Trigger.CALLS_QUEUED,
    StepOutcome.AWAITING_APPROVAL: Trigger.APPROVAL_ASKED,
}


def _answer_move(turn: _Turn, ask: Ask, step: Step) -> Move:
    """What a model step's outcome means for the turn; the kept history takes its answer."""
    if step.outcome == StepOutcome.EMPTY:
        return _no_text(turn, ask)
    if step.outcome == StepOutcome.FAILED:
        return Moved(Trigger.MODEL_FAILED)
    assert step.message is not None
    if step.outcome == StepOutcome.ANSWERED:  # the run still open: the follow-ups, then the end
        return Final(Trigger.ANSWERED, step.message)
    if step.outcome == StepOutcome.ENDED:  # completed with its answer
        return Moved(Trigger.COMPLETED)
    if step.outcome in _CALLS_ELSEWHERE:
        return Moved(_CALLS_ELSEWHERE[step.outcome])
    turn.history().append(step.message)
    for answer in step.answers:
        turn.history().append(answer)
    # The call this worker started (none when the policies refused every call of ours).
    inline = [e for e in step.executions if e.status == ExecutionStatus.RUNNING]
    return RunTools(Trigger.ONE_CALL, StepCalls(step.message, step.executions, inline))


def _no_text(turn: _Turn, ask: Ask) -> Move:
    """An answer with no text: asked once more; twice, the tools' messages answer, or it fails."""
    if ask.empty == 0:
        # Asked again under a new id: the failed call keeps the one it was announced with.
        opening = ask.opening
        again = (
            None
            if opening is None
            else step_open(turn.run, purpose=opening.purpose, model=opening.model)
        )
        return dataclasses.replace(
            ask, trigger=Trigger.NO_TEXT, opening=again, announce=(), empty=1
        )
    if ask.after is not None:
        return Direct(Trigger.NO_TEXT_TWICE_AFTER_TOOLS, ask.after)
    run_fail(
        turn.run,
        turn.token,
        "The model answered with no text, twice. Try again.",
        trigger=Trigger.NO_TEXT_TWICE,
    )
    return Moved(Trigger.NO_TEXT_TWICE)


def _running_tools(turn: _Turn, tools: Move) -> Move:
    """Run the step's one call here, or wait for calls that run elsewhere; then the policy.

    A step that also called a /v1 client's own tools ends the run once ours are
    answered: the client runs its calls, and its next request continues.
    """
    assert isinstance(tools, RunTools)
    run, token, calls = turn.run, turn.token, tools.calls
    if any(e.status == ExecutionStatus.CLIENT for e in calls.executions):
        for execution in calls.inline:
            turn.history().append(tool_call_run(run, token, execution, announce=()))
        if _calls_wait(turn, calls) is None:
            return Moved(Trigger.PARKED)
        return Final(Trigger.CLIENT_CALLS, calls.answer)
    if calls.inline and not returns_direct(calls.inline):
        # The next step is known before the call runs, so its message.created goes
        # out with the call's result, in the same transaction.
        following = next_step(run, turn.model, calls.inline)
        ahead = [following.opening.event()] if following.opening is not None else []
        for execution in calls.inline:
            turn.history().append(tool_call_run(run, token, execution, announce=ahead))
        following = dataclasses.replace(following, announced=bool(ahead))
    elif calls.inline:
        # Whether a return_direct call ends the turn depends on how it went.
        for execution in calls.inline:
            turn.history().append(tool_call_run(run, token, execution, announce=()))
        ran = ToolExecution.objects.filter(pk__in=[e.pk for e in calls.inline])
        following = next_step(run, turn.model, list(ran.only("name", "status", "error")))
    else:
        waited = _calls_wait(turn, calls)
        if waited is None:
            return Moved(Trigger.PARKED)
        calls = waited
        following = next_step(run, turn.model, calls.executions)
    return _after_calls(calls, following)


def _after_calls(calls: StepCalls, following: NextStep) -> Move:
    """What the policy chose after the step's calls: another model step, or the tools' messages."""
    trigger = AFTER_TOOLS[following.decision.action]
    if following.opening is None:
        return Direct(trigger, calls)
    return Ask(
        trigger,
        calls.position,
        after=calls,
        opening=following.opening,
        instruction=following.decision.instruction,
        announce=None if following.announced else (),
    )


def _calls_wait(turn: _Turn, calls: StepCalls) -> StepCalls | None:
    """Park the run while calls of the step run elsewhere (None); the calls once all are answered."""
    executions = calls.executions
    while unfinished := [e for e in executions if e.status not in FINISHED_EXECUTION_STATUSES]:
        if run_park(turn.run, turn.token, unfinished):
            return None
        # The last call finished meanwhile: its wake-up could not claim the run we hold.
        executions = list(ToolExecution.objects.filter(message=calls.answer))
    return dataclasses.replace(calls, executions=executions, inline=[])


def _direct(turn: _Turn, direct: Move) -> Move:
    """End the turn with the tools' own messages: no further model call."""
    assert isinstance(direct, Direct)
    calls = direct.calls
    direct_complete(turn.run, turn.token, calls.answer, position=calls.position)
    return Moved(Trigger.COMPLETED)


def _answered(turn: _Turn, final: Move) -> Move:
    """Complete the run: the model's follow-ups first, if wanted (chat/engine/turn_complete.py)."""
    assert isinstance(final, Final)
    answer_complete(turn.run, turn.token, final.answer, turn.kept)
    return Moved(Trigger.COMPLETED)


def _forced_steps(turn: _Turn, _forced: Move) -> Move:
    """A forced replay: the original's steps asked of the model, then the end."""
    done = forced_replay_run(turn.run, turn.token, model=turn.model, first=turn.first)
    return Moved(Trigger.COMPLETED if done else Trigger.MODEL_FAILED)


# The work of each state the run loop holds the run in: it takes the move that led there.
_WORK: dict[TurnState, Callable[[_Turn, Move], Move]] = {
    TurnState.CLAIMED: _claimed,
    TurnState.ASKING: _model_step,
    TurnState.COMPOSING: _model_step,
    TurnState.RUNNING_TOOLS: _running_tools,
    TurnState.DIRECT: _direct,
    TurnState.ANSWERED: _answered,
    TurnState.FORCED_STEPS: _forced_steps,
}
