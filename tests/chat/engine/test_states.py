"""The turn's states and the table of its transitions."""

from __future__ import annotations

import pytest

from chat.engine.continuation import Action
from chat.engine.states import (
    AFTER_TOOLS,
    ENDS,
    STORED_STATUS,
    TRANSITIONS,
    Trigger,
    TurnState,
    UnknownTransition,
    transition,
    worker_lets_go,
)
from chat.models import RunStatus

S, T = TurnState, Trigger


@pytest.mark.parametrize(
    ("state", "trigger", "expected"),
    [
        (S.QUEUED, T.CLAIMED, S.CLAIMED),
        (S.CLAIMED, T.NEW, S.ASKING),
        (S.CLAIMED, T.NOTHING_ANSWERED, S.ASKING),
        (S.CLAIMED, T.CALLS_STORED, S.RUNNING_TOOLS),
        (S.CLAIMED, T.ANSWER_STORED, S.ANSWERED),
        (S.ASKING, T.ONE_CALL, S.RUNNING_TOOLS),
        (S.ASKING, T.CALLS_QUEUED, S.PARKED),
        (S.ASKING, T.APPROVAL_ASKED, S.AWAITING_APPROVAL),
        (S.ASKING, T.ANSWERED, S.ANSWERED),
        (S.ASKING, T.COMPLETED, S.COMPLETED),
        (S.COMPOSING, T.COMPLETED, S.COMPLETED),
        (S.ASKING, T.NO_TEXT, S.ASKING),
        (S.ASKING, T.NO_TEXT_TWICE, S.FAILED),
        (S.ASKING, T.NO_TEXT_TWICE_AFTER_TOOLS, S.DIRECT),
        (S.ASKING, T.MODEL_FAILED, S.FAILED),
        (S.COMPOSING, T.ANSWERED, S.ANSWERED),
        (S.COMPOSING, T.NO_TEXT, S.COMPOSING),
        (S.COMPOSING, T.NO_TEXT_TWICE_AFTER_TOOLS, S.DIRECT),
        (S.COMPOSING, T.MODEL_FAILED, S.FAILED),
        (S.RUNNING_TOOLS, T.PARKED, S.PARKED),
        (S.RUNNING_TOOLS, T.NEXT_STEP, S.ASKING),
        (S.RUNNING_TOOLS, T.COMPOSE, S.COMPOSING),
        (S.RUNNING_TOOLS, T.DIRECT, S.DIRECT),
        (S.PARKED, T.WOKEN, S.CLAIMED),
        (S.AWAITING_APPROVAL, T.DECIDED, S.PARKED),
        (S.DIRECT, T.COMPLETED, S.COMPLETED),
        (S.ANSWERED, T.COMPLETED, S.COMPLETED),
        (S.CLAIMED, T.FORCED, S.FORCED_STEPS),
        (S.FORCED_STEPS, T.COMPLETED, S.COMPLETED),
        (S.FORCED_STEPS, T.MODEL_FAILED, S.FAILED),
        (S.FORCED_STEPS, T.CANCELLED, S.CANCELLED),
        (S.PARKED, T.CANCELLED, S.CANCELLED),
        (S.AWAITING_APPROVAL, T.CANCELLED, S.CANCELLED),
        (S.ASKING, T.ERROR, S.FAILED),
        (S.QUEUED, T.CANCELLED, S.CANCELLED),
    ],
)
def test_a_trigger_moves_the_run_to_the_state_the_table_names(state, trigger, expected):
    assert transition(state, trigger) == expected


@pytest.mark.parametrize(
    ("state", "trigger"),
    [
        (S.COMPLETED, T.CANCELLED),  # an ended run stays ended
        (S.FAILED, T.ERROR),
        (S.CANCELLED, T.CLAIMED),
        (S.COMPLETED, T.NEW),
        (S.COMPOSING, T.NO_TEXT_TWICE),  # a composing call always follows tools
        (S.PARKED, T.ONE_CALL),  # nobody runs a call of a parked run
        (S.QUEUED, T.ANSWERED),
        (S.RUNNING_TOOLS, T.ANSWERED),
        (S.FORCED_STEPS, T.ONE_CALL),  # a forced replay runs no tool
    ],
)
def test_a_trigger_that_cannot_happen_in_a_state_is_refused(state, trigger):
    with pytest.raises(UnknownTransition, match=str(trigger)):
        transition(state, trigger)


@pytest.mark.parametrize(
    ("state", "lets_go"),
    [
        (S.QUEUED, False),
        (S.CLAIMED, False),
        (S.ASKING, False),
        (S.RUNNING_TOOLS, False),
        (S.COMPOSING, False),
        (S.DIRECT, False),
        (S.ANSWERED, False),
        (S.PARKED, True),
        (S.AWAITING_APPROVAL, True),
        (S.COMPLETED, True),
        (S.FAILED, True),
        (S.CANCELLED, True),
    ],
)
def test_the_worker_lets_go_of_a_run_that_waits_or_ended(state, lets_go):
    assert worker_lets_go(state) is lets_go


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (Action.CALL_WITH_TOOLS, S.ASKING),
        (Action.DECIDE, S.ASKING),
        (Action.COMPOSE, S.COMPOSING),
        (Action.DIRECT, S.DIRECT),
    ],
)
def test_the_policys_decision_after_tools_names_the_next_state(action, expected):
    assert transition(S.RUNNING_TOOLS, AFTER_TOOLS[action]) == expected


def test_every_state_but_an_end_has_a_way_out_and_every_end_is_reached():
    sources = {state for state, _ in TRANSITIONS}
    targets = set(TRANSITIONS.values())
    ended = {S.COMPLETED, S.FAILED, S.CANCELLED}
    assert sources == set(TurnState) - ended
    assert targets == set(TurnState) - {S.QUEUED}


@pytest.mark.parametrize(
    ("state", "status"),
    [
        (S.QUEUED, RunStatus.QUEUED),
        (S.CLAIMED, RunStatus.RUNNING),
        (S.PARKED, RunStatus.RUNNING),
        (S.ANSWERED, RunStatus.RUNNING),
        (S.AWAITING_APPROVAL, RunStatus.AWAITING_APPROVAL),
        (S.COMPLETED, RunStatus.COMPLETED),
        (S.FAILED, RunStatus.FAILED),
        (S.CANCELLED, RunStatus.CANCELLED),
    ],
)
def test_each_state_has_the_stored_status_of_its_run(state, status):
    assert STORED_STATUS[state] == status
    assert set(STORED_STATUS) == set(TurnState)


@pytest.mark.parametrize(
    ("trigger", "end"),
    [
        (T.COMPLETED, S.COMPLETED),
        (T.CANCELLED, S.CANCELLED),
        (T.ERROR, S.FAILED),
        (T.MODEL_FAILED, S.FAILED),
        (T.LIMIT_REACHED, S.FAILED),
        (T.NO_TEXT_TWICE, S.FAILED),
    ],
)
def test_a_trigger_that_ends_a_run_ends_it_the_same_way_from_every_state(trigger, end):
    assert ENDS[trigger] == end
    assert {
        target
        for (_, said), target in TRANSITIONS.items()
        if said == trigger and target in ENDS.values()
    } == {end}


def test_only_the_triggers_that_end_a_run_have_an_end():
    assert set(ENDS) == {
        T.COMPLETED,
        T.CANCELLED,
        T.ERROR,
        T.MODEL_FAILED,
        T.LIMIT_REACHED,
        T.NO_TEXT_TWICE,
    }


def test_a_claim_stores_one_status_whether_the_run_was_queued_or_parked():
    # chat/engine/ledger/runs.py `run_claim` writes one status in its take-over's UPDATE.
    queued = STORED_STATUS[transition(S.QUEUED, T.CLAIMED)]
    woken = STORED_STATUS[transition(S.PARKED, T.WOKEN)]
    assert queued == woken == RunStatus.RUNNING
