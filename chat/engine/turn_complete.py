"""How the run loop completes a turn: after its answer (and the follow-ups), or with a direct reply.

The two ends chat/engine/run.py reaches from the ANSWERED and DIRECT states,
each one transaction through chat/engine/finish.py `run_end` (an answer that
ended its run in its own transaction never comes here).
"""

from __future__ import annotations

import uuid

from django.utils import timezone

from chat.engine.continuation import direct_reply
from chat.engine.finish import RunEnd, run_end
from chat.engine.ledger import direct_answer_create
from chat.engine.suggestions import (
    model_suggestions_ask,
    model_suggestions_wanted,
    model_suggestions_write,
    tool_suggestions,
)
from chat.history import RunHistory
from chat.models import Message, Role, Run


def answer_complete(
    run: Run, token: uuid.UUID, final: Message, history: RunHistory | None = None
) -> None:
    """Complete a run whose final answer is stored: the model's follow-ups first, if wanted.

    The turn's latency ends at its answer. The follow-ups are stored with the
    completion, in one transaction that first checks the lease: a run
    cancelled during the call stores and announces none of them.
    """
    end = RunEnd.completed(final.pk, at=timezone.now())
    wanted = model_suggestions_wanted(run)
    suggested = (
        model_suggestions_ask(run=run, token=token, final=final, history=history)
        if wanted
        else None
    )
    # The follow-ups call counts among the run's model calls (docs/audit.md).
    counters = {"model_calls": run.model_calls + 1} if suggested is not None else None
    with run_end(run, end, lease=token, counters=counters) as events:
        if wanted:
            events += model_suggestions_write(run=run, final=final, suggested=suggested)


def direct_complete(run: Run, token: uuid.UUID, last: Message, *, position: int) -> None:
    """End the turn with the tools' own messages: no further model call."""
    order = {call["id"]: index for index, call in enumerate(last.tool_calls or [])}
    answers = sorted(
        Message.objects.filter(run=run, role=Role.TOOL, tool_call_id__in=list(order)),
        key=lambda m: order.get(m.tool_call_id or "", 0),
    )
    text = direct_reply([answer.content or "" for answer in answers])
    message_id = uuid.uuid4()
    with run_end(run, RunEnd.completed(message_id), lease=token) as events:
        _, told = direct_answer_create(
            run=run,
            message_id=message_id,
            position=position,
            content=text,
            suggestions=tool_suggestions({"role": "tool", "content": a.content} for a in answers)
            or None,
        )
        events += told
