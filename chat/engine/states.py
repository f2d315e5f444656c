"""The turn as named states: where a run stands, and what moves it on.

A run's stored status (`RunStatus`) says who may work on it; its turn state
says what it is doing. The run loop (chat/engine/run.py) does the work of one
state, which reports a trigger (what happened), and `transition` names the
next state from this table; nothing else moves a run. A trigger reports work
already done: a model step that failed has marked the run failed before it
says `MODEL_FAILED`.

The table is the code of the stored status too: `STORED_STATUS` gives each
state's, and chat/engine/ledger/runs.py, the only module that writes `Run.status`,
stores the status of the state `transition` names for each move it makes (a
claim, a wait for approval, a decision, an end: `ENDS` names the end a
trigger leads to). An outside actor moves a run through it too: a person's
decision (chat/engine/approvals.py) and cancel (chat/services/runs.py).

                QUEUED
                  │ claimed (run_claim takes the lease)
                  ▼
       ┌───► CLAIMED ── answer_stored ──► ANSWERED (its worker died before the end)
       │          │ new, nothing_answered    │ calls_stored
       │          ▼                          ▼
       │   ┌─► ASKING ──── one_call ───► RUNNING_TOOLS
       │   │   (tools or decider)          │   │   │
       │   └─────────── next_step ─────────┘   │   └─ direct ──► DIRECT ── completed ──┐
       │                                       └─ compose ──► COMPOSING (no tools)     │
       │                                                                               │
       │   ASKING or COMPOSING, after its model call:                                  │
       │     answered ────────► ANSWERED ── completed ─────────────────────────────────┴► COMPLETED
       │     completed ───────► COMPLETED (stored with the answer: no follow-ups to ask)
       │     one_call ────────► RUNNING_TOOLS (this worker runs it)
       │     calls_queued ────► PARKED
       │     approval_asked ──► AWAITING_APPROVAL ── decided ──► PARKED
       │     no_text ─────────► the same state (asked once more)
       │     no_text_twice ───► FAILED (no tool ran)
       │     no_text_twice_after_tools ──► DIRECT (the tools' messages answer)
       │     model_failed ────► FAILED
       │     limit_reached ───► FAILED (a per-run budget limit, before the call)
       │
       │   RUNNING_TOOLS: parked ──► PARKED (its calls run elsewhere)
       │                  client_calls ──► ANSWERED (the rest are the /v1 client's calls)
       └────────── woken ───────── PARKED (the step's last call queues the run)

    Any state before an end: cancelled ──► CANCELLED, error ──► FAILED.

    A forced replay (chat/engine/forced_replay.py) follows the original's steps instead:
       CLAIMED ── forced ──► FORCED_STEPS ── completed ──► COMPLETED
                                          └─ model_failed ──► FAILED

In PARKED and AWAITING_APPROVAL no worker holds the run: its calls run as
tasks (the last one to finish wakes it, chat/engine/tool_calls.py), or wait
for a person's decision (chat/engine/approvals.py). In COMPLETED, FAILED and
CANCELLED it has ended (chat/engine/finish.py `run_end`). The worker's loop
stops in any of them (`worker_lets_go`); a lease lost (a cancel, a take-over)
stops it too, from any state, and whoever took the run moves it on.
"""

from __future__ import annotations

import enum

from chat.engine.continuation import Action
from chat.models import RunStatus


class TurnState(enum.StrEnum):
    """Where a run stands."""

    QUEUED = "queued"  # stored, waiting for a worker
    CLAIMED = "claimed"  # a worker holds its lease; where it stands is read next
    ASKING = "asking"  # a model call that offers the tools (or asks the decider)
    RUNNING_TOOLS = "running_tools"  # the step's calls: run here, or waited for
    PARKED = "parked"  # no lease: the step's calls run as tasks, the last one wakes it
    AWAITING_APPROVAL = "awaiting_approval"  # a call waits for a person's decision
    COMPOSING = "composing"  # a model call with no tools writes the answer from results
    DIRECT = "direct"  # the answer is the tools' own messages: no model call
    ANSWERED = "answered"  # the final answer is stored; the follow-ups, then the end
    FORCED_STEPS = "forced_steps"  # a forced replay asks the model each of the original's steps
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Trigger(enum.StrEnum):
    """What the work of a state (or someone outside the run loop) reports."""

    CLAIMED = "claimed"  # run_claim took the lease
    NEW = "new"  # nothing stored but the user's message
    NOTHING_ANSWERED = "nothing_answered"  # taken over before its first answer was stored
    CALLS_STORED = "calls_stored"  # taken over or woken: its last answer called tools
    ANSWER_STORED = "answer_stored"  # taken over: its last answer is final
    FORCED = "forced"  # a forced replay: the original's steps, not its own
    ONE_CALL = "one_call"  # the answer called one tool, for this worker to run now
    CALLS_QUEUED = "calls_queued"  # the answer's calls were queued as tasks; lease given back
    APPROVAL_ASKED = "approval_asked"  # a call of the answer waits for a person
    ANSWERED = "answered"  # the answer has text and no calls
    NO_TEXT = "no_text"  # no text and no calls: asked once more
    NO_TEXT_TWICE = "no_text_twice"  # again, and no tool ran: the run was failed
    NO_TEXT_TWICE_AFTER_TOOLS = "no_text_twice_after_tools"  # again: the tools' messages answer
    MODEL_FAILED = "model_failed"  # the model call failed; the run was failed
    LIMIT_REACHED = "limit_reached"  # a per-run budget limit is reached; the run was failed
    PARKED = "parked"  # calls are still running elsewhere; lease given back
    NEXT_STEP = "next_step"  # the policy asks for another step with tools
    COMPOSE = "compose"  # the policy asks for the answer, without tools
    DIRECT = "direct"  # the policy (or a return_direct tool) answers with the tools' messages
    CLIENT_CALLS = "client_calls"  # ours answered, the rest are the /v1 client's to run
    COMPLETED = "completed"  # the run was completed (by a final answer's own transaction too)
    WOKEN = "woken"  # the step's last call queued the run again
    DECIDED = "decided"  # no call waits for a person any more
    CANCELLED = "cancelled"  # a person cancelled the run (chat/services/runs.py)
    ERROR = "error"  # an internal error; the run was failed


# The states a run is active in (not ended), which a cancel or an error may end.
ACTIVE = frozenset(
    {
        TurnState.QUEUED,
        TurnState.CLAIMED,
        TurnState.ASKING,
        TurnState.RUNNING_TOOLS,
        TurnState.PARKED,
        TurnState.AWAITING_APPROVAL,
        TurnState.COMPOSING,
        TurnState.DIRECT,
        TurnState.ANSWERED,
        TurnState.FORCED_STEPS,
    }
)

_MODEL_STEP = {
    Trigger.ONE_CALL: TurnState.RUNNING_TOOLS,
    Trigger.CALLS_QUEUED: TurnState.PARKED,
    Trigger.APPROVAL_ASKED: TurnState.AWAITING_APPROVAL,
    Trigger.ANSWERED: TurnState.ANSWERED,
    Trigger.COMPLETED: TurnState.COMPLETED,
    Trigger.NO_TEXT_TWICE_AFTER_TOOLS: TurnState.DIRECT,
    Trigger.MODEL_FAILED: TurnState.FAILED,
    Trigger.LIMIT_REACHED: TurnState.FAILED,
}

TRANSITIONS: dict[tuple[TurnState, Trigger], TurnState] = {
    (TurnState.QUEUED, Trigger.CLAIMED): TurnState.CLAIMED,
    (TurnState.CLAIMED, Trigger.NEW): TurnState.ASKING,
    (TurnState.CLAIMED, Trigger.NOTHING_ANSWERED): TurnState.ASKING,
    (TurnState.CLAIMED, Trigger.CALLS_STORED): TurnState.RUNNING_TOOLS,
    (TurnState.CLAIMED, Trigger.ANSWER_STORED): TurnState.ANSWERED,
    (TurnState.CLAIMED, Trigger.FORCED): TurnState.FORCED_STEPS,
    (TurnState.FORCED_STEPS, Trigger.COMPLETED): TurnState.COMPLETED,
    (TurnState.FORCED_STEPS, Trigger.MODEL_FAILED): TurnState.FAILED,
    **{(TurnState.ASKING, trigger): state for trigger, state in _MODEL_STEP.items()},
    (TurnState.ASKING, Trigger.NO_TEXT): TurnState.ASKING,
    (TurnState.ASKING, Trigger.NO_TEXT_TWICE): TurnState.FAILED,
    **{(TurnState.COMPOSING, trigger): state for trigger, state in _MODEL_STEP.items()},
    (TurnState.COMPOSING, Trigger.NO_TEXT): TurnState.COMPOSING,
    (TurnState.RUNNING_TOOLS, Trigger.PARKED): TurnState.PARKED,
    (TurnState.RUNNING_TOOLS, Trigger.NEXT_STEP): TurnState.ASKING,
    (TurnState.RUNNING_TOOLS, Trigger.COMPOSE): TurnState.COMPOSING,
    (TurnState.RUNNING_TOOLS, Trigger.DIRECT): TurnState.DIRECT,
    (TurnState.RUNNING_TOOLS, Trigger.CLIENT_CALLS): TurnState.ANSWERED,
    (TurnState.PARKED, Trigger.WOKEN): TurnState.CLAIMED,
    (TurnState.AWAITING_APPROVAL, Trigger.DECIDED): TurnState.PARKED,
    (TurnState.DIRECT, Trigger.COMPLETED): TurnState.COMPLETED,
    (TurnState.ANSWERED, Trigger.COMPLETED): TurnState.COMPLETED,
    **{(state, Trigger.CANCELLED): TurnState.CANCELLED for state in ACTIVE},
    **{(state, Trigger.ERROR): TurnState.FAILED for state in ACTIVE},
}


_ENDED = frozenset({TurnState.COMPLETED, TurnState.FAILED, TurnState.CANCELLED})

# The end each trigger that ends a run leads to, from any state it may happen in:
# what chat/engine/ledger/runs.py `run_ended` stores, read off the table.
ENDS: dict[Trigger, TurnState] = {
    trigger: ended for (_, trigger), ended in TRANSITIONS.items() if ended in _ENDED
}


class UnknownTransition(Exception):
    """A state was told of something that cannot happen in it: a bug in the run loop."""


def transition(state: TurnState, trigger: Trigger) -> TurnState:
    """The state a run in `state` is in once `trigger` happened."""
    try:
        return TRANSITIONS[(state, trigger)]
    except KeyError:
        raise UnknownTransition(f"{trigger} cannot happen to a run that is {state}") from None


def worker_lets_go(state: TurnState) -> bool:
    """Whether the worker's loop stops in `state`: nobody holds the run, or it ended."""
    return state in _LET_GO


_LET_GO = frozenset({TurnState.PARKED, TurnState.AWAITING_APPROVAL, *_ENDED})

# What the policy's decision after a step of tools leads to (chat/engine/continuation.py).
AFTER_TOOLS: dict[Action, Trigger] = {
    Action.CALL_WITH_TOOLS: Trigger.NEXT_STEP,
    Action.DECIDE: Trigger.NEXT_STEP,
    Action.COMPOSE: Trigger.COMPOSE,
    Action.DIRECT: Trigger.DIRECT,
}

# The stored status of a run in each state (`Run.status`).
STORED_STATUS: dict[TurnState, RunStatus] = {
    TurnState.QUEUED: RunStatus.QUEUED,
    TurnState.AWAITING_APPROVAL: RunStatus.AWAITING_APPROVAL,
    TurnState.COMPLETED: RunStatus.COMPLETED,
    TurnState.FAILED: RunStatus.FAILED,
    TurnState.CANCELLED: RunStatus.CANCELLED,
    **dict.fromkeys(
        (
            TurnState.CLAIMED,
            TurnState.ASKING,
            TurnState.RUNNING_TOOLS,
            TurnState.PARKED,
            TurnState.COMPOSING,
            TurnState.DIRECT,
            TurnState.ANSWERED,
            TurnState.FORCED_STEPS,
        ),
        RunStatus.RUNNING,
    ),
}
