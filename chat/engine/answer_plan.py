"""What a model's answer asks for: its calls, what the policies decided, and who runs them.

A model step's answer is planned here before chat/engine/answer_store.py
stores it: which calls are the /v1 client's own, which a policy refuses,
which wait for a person (or run on a standing approval), whether this worker
runs the one call itself, and whether the answer ends the run. Nothing is
written here.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from django.conf import settings

from chat.engine.request import client_tool_names
from chat.engine.suggestions import model_suggestions_wanted
from chat.models import PolicyDecision, Run, StandingApproval
from chat.policies import Verdict, run_policies, standing_approvals_matching


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

    @property
    def answered(self) -> bool:
        """Every call of ours is answered with the answer itself (each one was refused)."""
        return bool(self.denied) and len(self.denied) == len(self.calls) - len(self.client)


def answer_plan(run: Run, calls: list[dict[str, Any]]) -> AnswerPlan:
    client_names = client_tool_names(run)
    client = [call for call in calls if call["function"]["name"] in client_names]
    ours = [call for call in calls if call not in client]
    policies = run_policies(run)
    verdicts = {
        call["id"]: policies.verdict(
            call["function"]["name"], decoded_arguments(call["function"]["arguments"])
        )
        for call in ours
    }
    denied = [call for call in ours if verdicts[call["id"]].decision == PolicyDecision.DENY]
    held, standing = _asked(run, ours, verdicts)
    runnable = len(ours) - len(denied) - len(held)
    # One call to run is run here; with none left (all refused) the worker goes on as well.
    inline = not held and (
        (runnable == 1 and settings.TOOLCHAT_INLINE_TOOL_CALLS) or (runnable == 0 and bool(ours))
    )
    # A final answer ends the run here, unless the model's follow-ups are asked first
    # (chat/engine/turn_complete.py `answer_complete`): every event of a run precedes its end. So
    # does an answer that calls only the client's tools: the client has the turn now.
    ending = (not calls and not model_suggestions_wanted(run)) or (bool(calls) and not ours)
    return AnswerPlan(calls, held, client, denied, verdicts, standing, inline, ending)


def _asked(
    run: Run, ours: list[dict[str, Any]], verdicts: dict[str, Verdict]
) -> tuple[list[dict[str, Any]], dict[str, StandingApproval]]:
    """The calls that wait for a person, and those asked that a standing approval lets run.

    A run whose calls run nothing (a replay with recorded tools) needs no person's approval.
    """
    if not run.sources.tools_run:
        return [], {}
    asking = [call for call in ours if verdicts[call["id"]].decision == PolicyDecision.ASK]
    standing = standing_approvals_matching(
        run,
        [
            (call["id"], call["function"]["name"], decoded_arguments(call["function"]["arguments"]))
            for call in asking
        ],
    )
    return [call for call in asking if call["id"] not in standing], standing


def decoded_arguments(arguments: str) -> Any:
    """A call's arguments as JSON, or None when they are not valid JSON."""
    try:
        return json.loads(arguments)
    except (TypeError, ValueError):
        return None
