"""A model call's audit row: the one writer of ModelCall rows.

No other module creates or updates a ModelCall (tests/chat/engine/
test_one_model_call_writer.py holds it). A call's row is stored once, when
the call has ended (docs/audit.md): built unsaved when the call starts,
filled in as it goes, and inserted either at once, failed, or with what its
answer became, in that answer's transaction.

    model_call_row        the (unsaved) row of a call starting (chat/engine/model_calls.py)
    model_call_asked      what it sends: the messages' count, the request's hash, the tools
    model_call_answered   it answered: succeeded, with the completion's figures
    model_call_figures    the completion's figures alone (an empty answer, failed after all)
    model_call_failed     stored at once, failed, with why and its attempts
    model_call_stopped    the same, counted in its run's `model_calls` (a cancel, an error,
                          a worker that died: whoever ended the run did not know of it)
    model_call_answer_store  inserted with the step's answer (chat/engine/answer_store.py)
    model_call_forced     a forced replay's answer kept on the row (chat/engine/forced_replay.py)
    model_call_forced_store  a forced replay's row inserted, with its final answer if any
    model_call_unreadable    follow-ups that are not the JSON asked: failed, with why
    model_call_suggest_store the follow-ups call inserted with the run's completion
                             (chat/engine/suggestions.py)

Each write is the statement it was before it lived here (an INSERT of the
row, in a savepoint for a failed one whose id a take-over may have taken).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F

from chat.llm.base import Completion
from chat.llm.endpoints import call_cost
from chat.models import CallStatus, Message, ModelCall, Run
from chat.statements import row_insert


def model_call_row(
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
        replay=run.sources.replay,
        step=step,
        purpose=purpose,
        model=model[:128],
        provider=provider,
        started_at=started_at,
    )


def model_call_asked(
    row: ModelCall, *, message_count: int, request_hash: str, tools_offered: list[str]
) -> None:
    """Note on the (unsaved) row what the call sends."""
    row.message_count = message_count
    row.request_hash = request_hash
    row.tools_offered = tools_offered


def model_call_answered(row: ModelCall, completion: Completion) -> None:
    """Mark the (unsaved) row of a call that answered: succeeded, with its figures."""
    row.status = CallStatus.SUCCEEDED
    model_call_figures(row, completion)


def model_call_figures(row: ModelCall, completion: Completion) -> None:
    """Copy a finished call's figures onto its (unsaved) row."""
    row.finish_reason = completion.finish_reason
    row.first_token_ms = completion.first_token_ms
    row.latency_ms = completion.latency_ms
    row.prompt_tokens = completion.prompt_tokens
    row.completion_tokens = completion.completion_tokens
    row.cached_tokens = completion.cached_tokens
    row.cost_usd = call_cost(
        provider=row.provider,
        models=(row.model, completion.model),
        prompt=completion.prompt_tokens,
        completion=completion.completion_tokens,
        cached=completion.cached_tokens,
    )
    row.attempts = completion.attempts
    row.model = completion.model or row.model
    row.note = completion.note[:300]
    row.logprobs = completion.logprobs


def model_call_failed(row: ModelCall, error: str, *, attempts: int = 0) -> bool:
    """Store a call that failed; False if a takeover recorded it first."""
    row.status = CallStatus.FAILED
    row.error = error
    row.attempts = attempts
    try:
        with transaction.atomic():
            row.save(force_insert=True)
    except IntegrityError:
        return False  # its id is taken: the worker that took the run over recorded it
    return True


def model_call_stopped(run: Run, row: ModelCall, error: str) -> bool:
    """Store a call that failed and count it in its run; False if a takeover recorded it first.

    For a call whoever ended (or took over) the run did not know of: it
    counts all the same. Only the stored row is counted, once.
    """
    if not model_call_failed(row, error):
        return False
    Run.objects.filter(pk=run.pk).update(model_calls=F("model_calls") + 1)
    return True


def model_call_answer_store(row: ModelCall, message: Message) -> None:
    """Insert the row of the call that wrote `message`, in the answer's transaction."""
    row.response_message = message
    row_insert(row)


def model_call_forced(row: ModelCall, answer: dict[str, Any]) -> None:
    """Keep on a forced replay's (unsaved) row what the model answered at the original's step."""
    row.forced_answer = answer


def model_call_forced_store(row: ModelCall, message: Message | None = None) -> None:
    """Insert a forced replay's row; with the replay's final answer when it wrote one."""
    if message is not None:
        row.response_message = message
    row.save(force_insert=True)


def model_call_unreadable(row: ModelCall, error: str) -> None:
    """Mark the (unsaved) row of follow-ups that are not what was asked: failed, with why."""
    row.status = CallStatus.FAILED
    row.error = error


def model_call_suggest_store(row: ModelCall) -> None:
    """Insert the follow-ups call's row, in the transaction that completes the run."""
    ModelCall.objects.bulk_create([row])
