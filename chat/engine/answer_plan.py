"""What a model's answer asks for: its calls, what the policies decided, and who runs them.

A model step's answer is planned here before chat/engine/answer_store.py
stores it, from what the policies judged of its calls (chat/policies.py
`calls_judged`: which are the /v1 client's own, which a policy refuses,
which wait for a person or run on a standing approval): whether this worker
runs the one call itself, whether the answer ends the run, and so what the
run loop does next (`StepOutcome`) and what the answer writes on the run's
row. Nothing is written here.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from django.conf import settings

from chat.engine.step_context import StepContext
from chat.models import Run, StandingApproval
from chat.policies import Judged, Verdict


class StepOutcome(enum.Enum):
    """What the run loop does after a model step."""

    ENDED = "ended"  # the answer's own transaction completed the run (no follow-ups to ask)
    ANSWERED = "answered"  # a final answer, the run still open: the follow-ups, then the end
    CALLS = "calls"  # one tool call, for this worker to run now
    PARKED = "parked"  # tool calls queued as tasks; their latch resumes the run
    AWAITING_APPROVAL = "awaiting_approval"  # a call waits for a person; nobody holds the run
    FAILED = "failed"  # the run was marked failed
    EMPTY = "empty"  # no text and no calls: nothing stored but the call, for the loop to retry


@dataclasses.dataclass(frozen=True)
class AnswerPlan:
    """What an answer asks for: its calls, what the policies decided, and who runs them."""

    calls: list[dict[str, Any]]
    held: list[dict[str, Any]]  # calls that wait for a person
    client: list[dict[str, Any]]  # calls of the /v1 client's own tools: returned to it
    denied: list[dict[str, Any]]  # calls a policy refuses: answered with the answer
    verdicts: dict[str, Verdict]  # by call id, for each call of ours
    standing: dict[str, StandingApproval]  # by call id: asked, and said yes to already
    inline: bool  # this worker goes on: it runs the one call, or none is left to run
    ending: bool  # an answer that completes the run in its own transaction
    outcome: StepOutcome  # what the run loop does once the answer is stored
    fields: dict[str, Any]  # the run's columns written with the answer

    @property
    def answered(self) -> bool:
        """Every call of ours is answered with the answer itself (each one was refused)."""
        return bool(self.denied) and len(self.denied) == len(self.calls) - len(self.client)


def answer_plan(context: StepContext, calls: list[dict[str, Any]], judged: Judged) -> AnswerPlan:
    """Plan the answer's `calls`, as the step's policies judged them (chat/policies.py `calls_judged`)."""
    run, ours, held, denied = context.run, judged.ours, judged.held, judged.denied
    inline = _goes_on(len(ours), denied=len(denied), held=len(held))
    # A final answer ends the run here, unless the model's follow-ups are asked first
    # (chat/engine/turn_complete.py `answer_complete`): every event of a run precedes its end. So
    # does an answer that calls only the client's tools: the client has the turn now.
    ending = (not calls and not context.suggestions_wanted) or (bool(calls) and not ours)
    return AnswerPlan(
        calls,
        held,
        judged.client,
        denied,
        judged.verdicts,
        judged.standing,
        inline,
        ending,
        outcome=_outcome(calls, held=bool(held), inline=inline, ending=ending),
        fields=_run_fields(run, calls, inline=inline),
    )


def _goes_on(ours: int, *, denied: int, held: int) -> bool:
    """Whether this worker goes on after the answer: it runs the one call of ours to run here.

    With none left to run (all refused) the worker goes on as well; with a call
    waiting for a person, nobody does.
    """
    if held:
        return False
    runnable = ours - denied - held
    return (runnable == 1 and settings.TOOLCHAT_INLINE_TOOL_CALLS) or (runnable == 0 and ours > 0)


def _outcome(calls: list[dict[str, Any]], *, held: bool, inline: bool, ending: bool) -> StepOutcome:
    """What the run loop does after the answer is stored."""
    if ending:  # a final answer, or calls for the client only: the run is completed
        return StepOutcome.ENDED
    if not calls:
        return StepOutcome.ANSWERED
    if inline:
        return StepOutcome.CALLS
    return StepOutcome.AWAITING_APPROVAL if held else StepOutcome.PARKED


def _run_fields(run: Run, calls: list[dict[str, Any]], *, inline: bool) -> dict[str, Any]:
    """The run's columns written with the answer: its counters, and no lease for calls run elsewhere."""
    fields: dict[str, Any] = {"model_calls": run.model_calls + 1}
    if calls:
        fields["steps"] = run.steps + 1
        if not inline:
            fields["lease"] = None
    return fields
