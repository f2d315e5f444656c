"""One model step, top to bottom: its inputs read, its call streamed, its answer stored.

A step reads what it needs once, at its start (chat/engine/step_context.py
`step_context`: the model resolved to its provider, the owner's policies, the
request), and is announced before its call by its `message.created` event:
alone in one statement, with `run.started` on a run's first step, or in the
transaction of the tool result that precedes it. Then the call
(chat/engine/model_calls.py, the one way a run calls a model, which records a
call that fails): its text is published as it streams (chat/engine/deltas.py:
the first delta at once, later ones coalesced), the one exception to a step
publishing its events once. Then the answer is read (a decider's JSON made a
call) and handed with the context to chat/engine/answer_store.py, which stores
it in one transaction under the run's lease (the message, its ModelCall row,
the audit rows of the calls it asks for, the step's events) and says what the
loop does next (`Step`). A call that failed, or a model no provider offers,
fails the run instead.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Sequence

from chat.database import HOLD_WHILE_UNREACHABLE_S, database_retry
from chat.engine.answer_plan import StepOutcome
from chat.engine.answer_store import Step, answer_store
from chat.engine.call_repair import decision_completion
from chat.engine.deltas import DeltaBuffer
from chat.engine.finish import run_fail
from chat.engine.ledger import answer_opened
from chat.engine.model_calls import model_call
from chat.engine.request import request_hash
from chat.engine.states import Trigger
from chat.engine.step_context import step_context
from chat.history import RunHistory
from chat.live.event_types import Event, MessageCreated
from chat.live.events import events_publish
from chat.llm.base import ChatRequest
from chat.llm.endpoints import UnknownModel
from chat.models import ModelCallPurpose, Run

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class StepOpening:
    """A model step about to start: the id its answer (and its ModelCall) will have."""

    purpose: str
    model: str
    step: int
    message_id: uuid.UUID = dataclasses.field(default_factory=uuid.uuid4)

    def event(self) -> MessageCreated:
        """Its `message.created` event, which also lets a takeover record a call that died."""
        return answer_opened(
            message_id=self.message_id, purpose=self.purpose, step=self.step, model=self.model
        )


def step_open(run: Run, *, purpose: str, model: str) -> StepOpening:
    """The opening of the run's next model step (nothing is stored until it is published)."""
    return StepOpening(purpose=purpose, model=model, step=run.steps + 1)


def model_step(
    run: Run,
    token: uuid.UUID,
    opening: StepOpening,
    *,
    position: int,
    history: RunHistory,
    instruction: str | None = None,
    announce: Sequence[Event] | None = (),
    hasher: Callable[[ChatRequest], str] = request_hash,
) -> Step:
    """One model call, streamed to the run's events; its answer stored at `position`.

    `history` is the conversation's (`chat.engine.request.history_load`),
    kept by the run loop, and `hasher` the run's `RequestHasher` (the call
    row's `request_hash`). The step's `message.created` is published first,
    after the events in `announce` (the run's `run.started`, on its first
    step); `announce=None` when the caller published it already.
    """
    # Announced before the call: the events in `announce`, then its message.created.
    announcement = [] if announce is None else [*announce, opening.event()]
    try:
        context = step_context(
            run,
            token,
            purpose=opening.purpose,
            model=opening.model,
            history=history,
            instruction=instruction,
            position=position,
            hasher=hasher,
        )
    except UnknownModel as exc:
        events_publish(run=run, events=list(announce or ()))
        run_fail(
            run,
            token,
            f"{exc} Choose another model for this conversation.",
            trigger=Trigger.MODEL_FAILED,
        )
        return Step(StepOutcome.FAILED)
    events_publish(run=run, events=announcement)  # none when it went out already
    deciding = opening.purpose == ModelCallPurpose.DECIDE
    # A decision is JSON for us, not text for the user: its stream is not shown.
    with DeltaBuffer(run, opening.message_id, shown=not deciding) as buffer:
        called = model_call(
            run,
            token,
            context.request,
            provider=context.provider,
            purpose=opening.purpose,
            step=opening.step,
            call_id=opening.message_id,
            on_delta=buffer.on_delta,
            hasher=hasher,
        )
    completion = called.completion
    if completion is not None and deciding:
        completion = decision_completion(completion)
    deltas = buffer.end(completion)
    if completion is None:
        run_fail(
            run,
            token,
            called.error,
            trigger=Trigger.MODEL_FAILED,
            counters={"model_calls": run.model_calls + 1},
        )
        return Step(StepOutcome.FAILED)
    # The answer exists only here until it is stored: through an outage it waits,
    # rather than the model being asked again (chat/database.py).
    return database_retry(
        lambda: answer_store(context, called.row, completion, deltas=deltas),
        within_s=HOLD_WHILE_UNREACHABLE_S,
    )
