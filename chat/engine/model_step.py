"""One model step: its request, its stream to live events, and its answer stored.

A step is announced before its call by its `message.created` event (`StepOpening`):
alone in one statement, with `run.started` on a run's first step, or in the
transaction of the tool result that precedes it. The first text delta is
published at once; later ones are coalesced. The answer is stored
(chat/engine/answer_store.py) in one transaction under the run's lease: the
message, its ModelCall row (written once, with the answer's id as its own), the audit rows of the tool calls it
asks for, and the step's events; an answer without tool calls ends the run in
that same transaction. A single call is run by this worker next
(`StepOutcome.CALLS`); several are queued on commit, one task each, and the
run is parked until they have all answered. The call itself, and its audit
row, are made by chat/engine/model_calls.py, the one way a run calls a model:
a call that fails is recorded there and fails the run here.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Sequence

from chat.database import HOLD_WHILE_UNREACHABLE_S, database_retry
from chat.engine.answer_store import Step, StepOutcome, answer_store
from chat.engine.call_repair import decision_completion
from chat.engine.deltas import DeltaBuffer
from chat.engine.finish import run_fail
from chat.engine.ledger import answer_opened
from chat.engine.model_calls import model_call
from chat.engine.request import request_build, request_hash
from chat.engine.states import Trigger
from chat.engine.suggestions import tool_suggestions
from chat.history import RunHistory
from chat.live.event_types import Event, MessageCreated
from chat.live.events import events_publish
from chat.llm import provider_for
from chat.llm.base import ChatRequest, StreamRestart, TextDelta
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
    try:
        provider, choice = provider_for(opening.model)
    except UnknownModel as exc:
        if announce is not None:
            events_publish(run=run, events=list(announce))
        run_fail(
            run,
            token,
            f"{exc} Choose another model for this conversation.",
            trigger=Trigger.MODEL_FAILED,
        )
        return Step(StepOutcome.FAILED)
    request = request_build(
        run, history, purpose=opening.purpose, model=choice.model, instruction=instruction
    )
    deciding = opening.purpose == ModelCallPurpose.DECIDE
    if announce is not None:
        events_publish(run=run, events=[*announce, opening.event()])
    buffer = DeltaBuffer(run, opening.message_id)

    def on_delta(event: TextDelta | StreamRestart) -> None:
        if isinstance(event, StreamRestart):
            buffer.reset(event.reason)
        elif not deciding:  # a decision is JSON for us, not text for the user
            buffer.add(event.text)

    try:
        called = model_call(
            run,
            token,
            request,
            provider=provider,
            purpose=opening.purpose,
            step=opening.step,
            call_id=opening.message_id,
            on_delta=on_delta,
            hasher=hasher,
        )
    except BaseException:
        buffer.flush()  # what was shown stays shown
        raise
    completion = called.completion
    if completion is None:
        buffer.flush()
        run_fail(
            run,
            token,
            called.error,
            trigger=Trigger.MODEL_FAILED,
            counters={"model_calls": run.model_calls + 1},
        )
        return Step(StepOutcome.FAILED)
    if deciding:
        completion = decision_completion(completion)
        if completion.content:
            buffer.add(completion.content)
    deltas = buffer.take()
    suggestions = tool_suggestions(request.messages)
    # The answer exists only here until it is stored: through an outage it waits,
    # rather than the model being asked again (chat/database.py).
    return database_retry(
        lambda: answer_store(
            run,
            token,
            called.row,
            completion,
            position=position,
            deltas=deltas,
            suggestions=suggestions,
        ),
        within_s=HOLD_WHILE_UNREACHABLE_S,
    )
