"""A model call's audit row: filled from its completion, stored failed, or recorded on takeover.

A ModelCall is written once, when its call has ended, with the answer's id as
its own (chat/engine/model_step.py). A call whose worker died leaves only its
announcement, the `message.created` event; `interrupted_call_record` turns
that into the failed row.
"""

from __future__ import annotations

import uuid

from chat.llm.base import Completion
from chat.llm.endpoints import UnknownModel, model_resolve
from chat.models import CallStatus, ModelCall, ModelCallPurpose, Run, RunEvent


def completion_fill(model_call: ModelCall, completion: Completion) -> None:
    """Copy a finished call's figures onto its (unsaved) row."""
    model_call.finish_reason = completion.finish_reason
    model_call.first_token_ms = completion.first_token_ms
    model_call.latency_ms = completion.latency_ms
    model_call.prompt_tokens = completion.prompt_tokens
    model_call.completion_tokens = completion.completion_tokens
    model_call.attempts = completion.attempts
    model_call.model = completion.model or model_call.model
    model_call.note = completion.note[:300]


def failed_call_record(model_call: ModelCall, error: str, *, attempts: int = 0) -> None:
    """Store a call that failed (unless a takeover recorded it first)."""
    model_call.status = CallStatus.FAILED
    model_call.error = error
    model_call.attempts = attempts
    ModelCall.objects.bulk_create([model_call], ignore_conflicts=True)


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
    model_call = ModelCall(
        id=message_id,
        run=run,
        step=data["step"],
        purpose=data["purpose"],
        **_model_and_provider(str(data.get("model", ""))),
        started_at=created_at,
    )
    failed_call_record(model_call, "The worker making this call stopped before it finished.")


def _model_and_provider(model: str) -> dict[str, str]:
    """A call's `model` and `provider` columns, from the model id its opening announced."""
    try:
        choice = model_resolve(model)
    except UnknownModel:
        return {"model": model[:128], "provider": ""}
    return {"model": choice.model, "provider": choice.provider}
