"""A forced (teacher-forced) replay: the new model asked at each of the original's steps.

A free replay lets the new model run the turn its own way; once the two
models diverge (another tool, other arguments), what follows is no longer
comparable. A forced replay asks the new model, at each step of the original
run, what it would do given exactly the original's history up to that step
(the original's calls and their recorded results, not its own), and runs no
tool. The rules:

- The steps are the original's model calls that answered (purpose `tools`,
  `decide` or `compose`; not the follow-ups), in order. Each is asked again
  with the same purpose and step number, the history being the replay
  conversation's rows before the original's answer to it (chat/services/
  replays.py copied the original turn into it, in the same positions), and
  the instruction the continuation policy gives that step.
- Each call is made and audited by `model_call`, as every call is. What the
  model answered (`{"content", "tool_calls"}`) is kept on its row,
  `ModelCall.forced_answer`: it joins no history, and no tool runs.
- The answer to the original's last step is the replay's final answer: it
  is stored where the original's was, and the run completes with it
  (`run_end`). A call that fails fails the run.
- A run taken over carries on after the steps already stored.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction

from chat.engine.answer_store import answer_figures
from chat.engine.call_repair import decision_completion, repaired_tool_calls
from chat.engine.continuation import decide_after_tools
from chat.engine.finish import RunEnd, run_end, run_fail
from chat.engine.ledger import (
    assistant_message_create,
    model_call_forced,
    model_call_forced_store,
    run_started,
    run_write,
)
from chat.engine.model_calls import model_call
from chat.engine.request import client_tool_names, request_build
from chat.engine.states import Trigger
from chat.history import RunHistory
from chat.history_rows import history_rows
from chat.live.events import event_publish
from chat.llm import provider_for
from chat.llm.base import Completion
from chat.llm.endpoints import UnknownModel
from chat.models import CallStatus, ModelCall, ModelCallPurpose, Run
from chat.policies import run_policies
from chat.prompts import run_system_prompt

# The original's calls that are steps of its turn (the follow-ups are not).
_STEP_PURPOSES = (ModelCallPurpose.TOOLS, ModelCallPurpose.DECIDE, ModelCallPurpose.COMPOSE)


def forced_replay_run(run: Run, token: uuid.UUID, *, model: str, first: bool) -> bool:
    """Ask `model` each of the original's steps not asked yet; True once the run completed.

    False when it failed (a model call failed; the run was failed).
    """
    original_id = run.replay_of_id
    assert original_id is not None  # a forced replay replays a run
    if first:
        event_publish(run=run, event=run_started(run))
    steps = list(
        ModelCall.objects.filter(
            run_id=original_id,
            purpose__in=_STEP_PURPOSES,
            status=CallStatus.SUCCEEDED,
            response_message__isnull=False,
        )
        .select_related("response_message")
        .order_by("started_at")
    )
    asked = set(
        ModelCall.objects.filter(run=run, forced_answer__isnull=False).values_list(
            "step", "purpose"
        )
    )
    rows = history_rows(conversation=run.conversation)
    try:
        provider, choice = provider_for(model)
    except UnknownModel as exc:
        run_fail(
            run,
            token,
            f"{exc} Choose another model for this replay.",
            trigger=Trigger.MODEL_FAILED,
        )
        return False
    for index, original in enumerate(steps):
        if (original.step, original.purpose) in asked:
            continue
        answer = original.response_message
        assert answer is not None
        before = [row for row in rows if row.position < answer.position]
        request = request_build(
            run,
            RunHistory(before, system_prompt=run_system_prompt(run)),
            purpose=original.purpose,
            model=choice.model,
            instruction=_instruction(run, original),
            policies=run_policies(run),  # read once, kept on the run
            theirs=client_tool_names(run),
        )
        called = model_call(
            run, token, request, provider=provider, purpose=original.purpose, step=original.step
        )
        if called.completion is None:
            run_fail(
                run,
                token,
                called.error,
                trigger=Trigger.MODEL_FAILED,
                counters={"model_calls": run.model_calls + 1},
            )
            return False
        completion = called.completion
        if original.purpose == ModelCallPurpose.DECIDE:
            completion = decision_completion(completion)
        model_call_forced(called.row, _answer(completion))
        if index == len(steps) - 1:
            # Where the original's answer was; after the copy when it was no final answer.
            position = rows[-1].position + 1 if answer.tool_calls else answer.position
            _final_store(run, token, called.row, completion, position=position)
            return True
        with transaction.atomic():
            run_write(run, token, model_calls=run.model_calls + 1, steps=original.step)
            model_call_forced_store(called.row)
    run_fail(
        run,
        token,
        "The original run has no answered step to replay.",
        trigger=Trigger.MODEL_FAILED,
    )
    return False


def _instruction(run: Run, original: ModelCall) -> str | None:
    """The instruction the original's step was given: the policy's, for a composing call."""
    if original.purpose != ModelCallPurpose.COMPOSE:
        return None
    decision = decide_after_tools(
        mode=run.mode,
        steps_done=original.step - 1,
        max_steps=run.conversation.max_steps,
        return_direct=False,
        model=original.provider_model,
    )
    return decision.instruction


def _answer(completion: Completion) -> dict[str, Any]:
    """What the model answered at a step: its text and its calls, in OpenAI shape."""
    return {"content": completion.content, "tool_calls": repaired_tool_calls(completion)}


def _final_store(
    run: Run, token: uuid.UUID, row: ModelCall, completion: Completion, *, position: int
) -> None:
    """Store the answer to the original's last step as the replay's answer, and complete it.

    Only its text: calls it would make instead are on its row and run nowhere.
    """
    with run_end(
        run,
        RunEnd.completed(row.pk),
        lease=token,
        counters={"model_calls": run.model_calls + 1},
    ) as events:
        message, completed = assistant_message_create(
            run=run,
            message_id=row.pk,
            position=position,
            content=completion.content or "",
            **answer_figures(completion),
        )
        model_call_forced_store(row, message)
        events.append(completed)
