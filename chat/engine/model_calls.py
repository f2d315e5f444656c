"""Every model call of a run: made, streamed and recorded here, whoever asks for it.

`model_call` is the one way the engine calls a model: a step of the turn
(chat/engine/model_step.py) and the follow-ups after its answer
(chat/engine/suggestions.py) both go through it. It has the call's audit
row built, a ModelCall with the answer's id as its own (the ledger writes
every ModelCall: chat/engine/ledger/model_calls.py), releases the database
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
stopped by a cancel, or recorded after its worker died, is added with its row.

A call whose worker died leaves only its announcement, the `message.created`
event; `interrupted_call_record` turns that into the failed row.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

from django.utils import timezone

from chat.engine.lease import Heartbeat, LeaseLost, connection_release
from chat.engine.ledger import (
    model_call_answered,
    model_call_asked,
    model_call_failed,
    model_call_row,
    model_call_stopped,
)
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
from chat.llm.endpoints import UnknownModel, model_resolve
from chat.models import ModelCall, ModelCallPurpose, Run, RunEvent
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
    It reads top to bottom, within the call's span (chat/telemetry/tracing.py):
    the row built, the stream read, the row's end, the run's use added.
    """
    with model_call_span(run, request, provider=provider.name) as record:
        row = model_call_row(
            run,
            call_id=call_id or uuid.uuid4(),
            step=step,
            purpose=purpose,
            model=request.model,
            provider=provider.name,
            started_at=timezone.now(),
        )
        model_call_asked(
            row,
            message_count=len(request.messages),
            request_hash=hasher(request),
            tools_offered=[tool["function"]["name"] for tool in request.tools or []],
        )
        completion: Completion | None = None
        error = ""
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
            completion, error = None, str(exc)
            model_call_failed(row, error, attempts=exc.attempts)
        except (LeaseLost, ProviderStopped) as exc:
            model_call_stopped(run, row, STOPPED)
            raise LeaseLost(str(run.pk)) from exc
        except Exception as exc:
            model_call_stopped(run, row, f"{type(exc).__name__}: {exc}")
            raise
        else:
            if completion is None:
                error = f"The model ({provider.name}) ended its answer without finishing it."
                model_call_failed(row, error, attempts=0)
            else:
                model_call_answered(row, completion)
                run_used_add(run, row)
        record(row, completion)
    model_call_observe(run, row, completion)
    return Called(row, completion, error)


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
    model_call = model_call_row(
        run,
        call_id=message_id,
        step=data["step"],
        purpose=data["purpose"],
        **_model_and_provider(str(data.get("model", ""))),
        started_at=created_at,
    )
    if model_call_stopped(
        run, model_call, "The worker making this call stopped before it finished."
    ):
        # The caller holds the lease: nobody else writes the run's counters meanwhile.
        run.model_calls += 1
        model_call_lost(run, model_call)


def _model_and_provider(model: str) -> dict[str, str]:
    """A call's `model` and `provider` columns, from the model id its opening announced."""
    try:
        choice = model_resolve(model)
    except UnknownModel:
        return {"model": model[:128], "provider": ""}
    return {"model": choice.model, "provider": choice.provider}
