"""Every model call of a run: made, streamed and recorded here, whoever asks for it.

`model_call` is the one way the engine calls a model: a step of the turn
(chat/engine/model_step.py) and the follow-ups after its answer
(chat/engine/suggestions.py) both go through it. It builds the call's audit
row, a ModelCall with the answer's id as its own, releases the database
connection for the call's duration, keeps the run's lease alive while the
model answers, and passes each streamed event to the caller. The rule for
the row:

- a call that fails (the provider's error, a stream that ends unfinished, a
  cancel or a take-over, an internal error) is stored at once, failed, with
  what went wrong and the attempts it took;
- a call that answers is returned unsaved, its figures filled in: the caller
  stores it in the transaction that stores what the answer became
  (chat/engine/answer_store.py, or the run's completion for follow-ups).

Every call counts in its run's `model_calls`, whatever it was for and however
it ended (docs/audit.md): the caller adds it with what it writes, and a call
stopped by a cancel, or recorded after its worker died, is added here.

A call whose worker died leaves only its announcement, the `message.created`
event; `interrupted_call_record` turns that into the failed row.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from chat.engine.lease import Heartbeat, LeaseLost, connection_release
from chat.engine.request import request_hash
from chat.engine.run_limits import run_used_add
from chat.llm.base import (
    ChatProvider,
    ChatRequest,
    Completion,
    Done,
    ProviderError,
    ProviderStopped,
    StreamRestart,
    TextDelta,
)
from chat.llm.endpoints import UnknownModel, call_cost, model_resolve
from chat.models import CallStatus, ModelCall, ModelCallPurpose, Run, RunEvent
from chat.telemetry.metrics import model_call_observe
from chat.telemetry.tracing import model_call_lost, model_call_span

STOPPED = "Stopped: the run was cancelled or taken over."


@dataclasses.dataclass(frozen=True)
class Called:
    """A model call that ended: its audit row, and its completion or why there is none.

    With a completion, `row` is unsaved (the caller stores it with the answer);
    without one, it was stored failed and `error` says why, for the user.
    """

    row: ModelCall
    completion: Completion | None
    error: str = ""


def model_call(
    run: Run,
    token: uuid.UUID,
    request: ChatRequest,
    *,
    provider: ChatProvider,
    purpose: str,
    step: int,
    call_id: uuid.UUID | None = None,
    on_delta: Callable[[TextDelta | StreamRestart], None] | None = None,
    hasher: Callable[[ChatRequest], str] = request_hash,
) -> Called:
    """Ask the model `request` for the run, under its lease, and record the call.

    `call_id` is the id the call's opening announced (the answer's, and the
    row's). Text deltas and restarts go to `on_delta` as they arrive. `hasher`
    gives the row's `request_hash` (a run's `RequestHasher`). Raises
    LeaseLost when the run was cancelled or taken over meanwhile, and
    re-raises what no provider should raise, each after storing the failed row.
    """
    with model_call_span(run, request, provider=provider.name) as record:
        called = _call(
            run,
            token,
            request,
            provider=provider,
            purpose=purpose,
            step=step,
            call_id=call_id,
            on_delta=on_delta,
            hasher=hasher,
        )
        record(called.row, called.completion)
    model_call_observe(run, called.row, called.completion)
    return called


def _call(
    run: Run,
    token: uuid.UUID,
    request: ChatRequest,
    *,
    provider: ChatProvider,
    purpose: str,
    step: int,
    call_id: uuid.UUID | None,
    on_delta: Callable[[TextDelta | StreamRestart], None] | None,
    hasher: Callable[[ChatRequest], str],
) -> Called:
    row = call_row(
        run,
        call_id=call_id or uuid.uuid4(),
        step=step,
        purpose=purpose,
        model=request.model,
        provider=provider.name,
        started_at=timezone.now(),
    )
    row.message_count = len(request.messages)
    row.request_hash = hasher(request)
    row.tools_offered = [tool["function"]["name"] for tool in request.tools or []]
    completion: Completion | None = None
    connection_release()
    try:
        with Heartbeat(run, token) as heartbeat:
            for event in provider.stream(request, stop=heartbeat.lost_event):
                heartbeat.check()
                if isinstance(event, Done):
                    completion = event.completion
                elif on_delta is not None:
                    on_delta(event)
            heartbeat.check()
    except ProviderError as exc:
        return _failed(row, str(exc), attempts=exc.attempts)
    except (LeaseLost, ProviderStopped) as exc:
        if failed_call_record(row, STOPPED):
            # Whoever ended the run did not know of this call; it counts all the same.
            Run.objects.filter(pk=run.pk).update(model_calls=F("model_calls") + 1)
        raise LeaseLost(str(run.pk)) from exc
    except Exception as exc:
        if failed_call_record(row, f"{type(exc).__name__}: {exc}"):
            Run.objects.filter(pk=run.pk).update(model_calls=F("model_calls") + 1)
        raise
    if completion is None:
        return _failed(row, f"The model ({provider.name}) ended its answer without finishing it.")
    row.status = CallStatus.SUCCEEDED
    completion_fill(row, completion)
    run_used_add(run, row)
    return Called(row, completion)


def _failed(row: ModelCall, error: str, *, attempts: int = 0) -> Called:
    failed_call_record(row, error, attempts=attempts)
    return Called(row, None, error)


def call_row(
    run: Run,
    *,
    call_id: uuid.UUID,
    step: int,
    purpose: str,
    model: str,
    provider: str,
    started_at: datetime,
) -> ModelCall:
    """The (unsaved) audit row of one model call of the run."""
    return ModelCall(
        id=call_id,
        run=run,
        replay=run.replay_of_id is not None,
        step=step,
        purpose=purpose,
        model=model[:128],
        provider=provider,
        started_at=started_at,
    )


def completion_fill(model_call: ModelCall, completion: Completion) -> None:
    """Copy a finished call's figures onto its (unsaved) row."""
    model_call.finish_reason = completion.finish_reason
    model_call.first_token_ms = completion.first_token_ms
    model_call.latency_ms = completion.latency_ms
    model_call.prompt_tokens = completion.prompt_tokens
    model_call.completion_tokens = completion.completion_tokens
    model_call.cached_tokens = completion.cached_tokens
    model_call.cost_usd = call_cost(
        provider=model_call.provider,
        models=(model_call.model, completion.model),
        prompt=completion.prompt_tokens,
        completion=completion.completion_tokens,
        cached=completion.cached_tokens,
    )
    model_call.attempts = completion.attempts
    model_call.model = completion.model or model_call.model
    model_call.note = completion.note[:300]
    model_call.logprobs = completion.logprobs


def failed_call_record(model_call: ModelCall, error: str, *, attempts: int = 0) -> bool:
    """Store a call that failed; False if a takeover recorded it first."""
    model_call.status = CallStatus.FAILED
    model_call.error = error
    model_call.attempts = attempts
    try:
        with transaction.atomic():
            model_call.save(force_insert=True)
    except IntegrityError:
        return False  # its id is taken: the worker that took the run over recorded it
    return True


def interrupted_call_record(run: Run) -> None:
    """Record the run's last announced model call if its worker died before storing it.

    Only one model call of a run is in flight at a time, under the lease, and
    each is stored with its answer or its failure: an announcement (the last
    `message.created`) with no ModelCall of its id is a call whose worker died.
    """
    announced = (
        RunEvent.objects.filter(run=run, type="message.created")
        .order_by("-seq")
        .values_list("data", "created_at")
        .first()
    )
    if announced is None:
        return
    data, created_at = announced
    if data.get("purpose") not in ModelCallPurpose.values or "step" not in data:
        return  # a direct reply, or an announcement from before calls were recorded this way
    message_id = uuid.UUID(data["message_id"])
    if ModelCall.objects.filter(pk=message_id).exists():
        return
    model_call = call_row(
        run,
        call_id=message_id,
        step=data["step"],
        purpose=data["purpose"],
        **_model_and_provider(str(data.get("model", ""))),
        started_at=created_at,
    )
    if failed_call_record(model_call, "The worker making this call stopped before it finished."):
        # The caller holds the lease: nobody else writes the run's counters meanwhile.
        Run.objects.filter(pk=run.pk).update(model_calls=F("model_calls") + 1)
        run.model_calls += 1
        model_call_lost(run, model_call)


def _model_and_provider(model: str) -> dict[str, str]:
    """A call's `model` and `provider` columns, from the model id its opening announced."""
    try:
        choice = model_resolve(model)
    except UnknownModel:
        return {"model": model[:128], "provider": ""}
    return {"model": choice.model, "provider": choice.provider}
