"""One model call: the request, its stream to live events, and the stored answer.

A step costs two transactions. The first opens it: the ModelCall row and the
`message.created` event (with `run.started` on a run's first step). The second
stores the answer under the run's lease, with its latency and usage, the audit
rows of the tool calls it asks for, and the step's events; an answer without
tool calls ends the run in that same transaction. A single call is run by this
worker next (`StepOutcome.CALLS`); several are queued on commit, one task
each, and the run is parked until they have all answered.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from chat.engine.answer import decision_completion, repaired_tool_calls
from chat.engine.dispatch import dispatch_tool
from chat.engine.finish import run_completed_event, run_end_fields, run_fail
from chat.engine.lease import Heartbeat, LeaseLost, run_write
from chat.engine.request import request_build, request_hash
from chat.engine.tool_calls import execution_build, execution_start, execution_started_event
from chat.history import message_to_api
from chat.live.events import event_publish, events_publish
from chat.llm import get_provider
from chat.llm.base import (
    Completion,
    Done,
    ProviderError,
    StreamRestart,
    TextDelta,
)
from chat.models import (
    CallStatus,
    Message,
    ModelCall,
    ModelCallPurpose,
    Role,
    Run,
    RunStatus,
    ToolExecution,
)

logger = logging.getLogger(__name__)


class StepOutcome(enum.Enum):
    """What the run loop does after a model step."""

    ANSWERED = "answered"  # a final answer: the run is completed
    CALLS = "calls"  # one tool call, for this worker to run now
    PARKED = "parked"  # tool calls queued as tasks; their latch resumes the run
    FAILED = "failed"  # the run was marked failed


@dataclasses.dataclass(frozen=True)
class Step:
    """A model step's outcome, with the answer and the audit rows of its calls."""

    outcome: StepOutcome
    message: Message | None = None
    executions: list[ToolExecution] = dataclasses.field(default_factory=list)


class _DeltaBuffer:
    """Coalesces text deltas into one `message.delta` event per interval."""

    def __init__(self, run: Run, message_id: uuid.UUID) -> None:
        self.run = run
        self.message_id = str(message_id)
        self.pending: list[str] = []
        self.flushed_at = time.monotonic()

    def add(self, text: str) -> None:
        self.pending.append(text)
        if time.monotonic() - self.flushed_at >= settings.TOOLCHAT_DELTA_INTERVAL_S:
            self.flush()

    def reset(self, reason: str) -> None:
        self.pending.clear()
        event_publish(
            run=self.run,
            type="message.delta",
            data={"message_id": self.message_id, "reset": True, "reason": reason, "text": ""},
        )

    def take(self) -> list[tuple[str, dict[str, Any]]]:
        """The text not yet published, as an event for the caller's batch (or none)."""
        if not self.pending:
            return []
        text = "".join(self.pending)
        self.pending.clear()
        return [("message.delta", {"message_id": self.message_id, "text": text})]

    def flush(self) -> None:
        if self.pending:
            text = "".join(self.pending)
            self.pending.clear()
            event_publish(
                run=self.run,
                type="message.delta",
                data={"message_id": self.message_id, "text": text},
            )
        self.flushed_at = time.monotonic()


def model_step(
    run: Run,
    token: uuid.UUID,
    *,
    purpose: str,
    model: str,
    position: int,
    rows: list[Message],
    instruction: str | None = None,
    opening: Sequence[tuple[str, dict[str, Any]]] = (),
) -> Step:
    """One model call, streamed to the run's events; its answer stored at `position`.

    `rows` is the conversation's history (`chat.engine.request.history_load`), kept by the run
    loop. `opening` are events to publish with this step's `message.created`
    (the run's `run.started`, on its first step).
    """
    request = request_build(run, rows, purpose=purpose, model=model, instruction=instruction)
    deciding = purpose == ModelCallPurpose.DECIDE
    provider = get_provider()
    message_id = uuid.uuid4()
    with transaction.atomic():
        model_call = ModelCall.objects.create(
            run=run,
            step=run.steps + 1,
            purpose=purpose,
            model=model,
            provider=provider.name,
            message_count=len(request.messages),
            request_hash=request_hash(request),
            tools_offered=[tool["function"]["name"] for tool in request.tools or []],
            started_at=timezone.now(),
        )
        created = {"message_id": str(message_id), "role": "assistant", "purpose": purpose}
        events_publish(run=run, events=[*opening, ("message.created", created)])
    buffer = _DeltaBuffer(run, message_id)
    completion: Completion | None = None
    try:
        with Heartbeat(run, token) as heartbeat:
            for event in provider.stream(request):
                heartbeat.check()
                if isinstance(event, TextDelta):
                    if not deciding:  # a decision is JSON for us, not text for the user
                        buffer.add(event.text)
                elif isinstance(event, StreamRestart):
                    buffer.reset(event.reason)
                elif isinstance(event, Done):
                    completion = event.completion
            heartbeat.check()
    except ProviderError as exc:
        buffer.flush()
        ModelCall.objects.filter(pk=model_call.pk).update(
            status=CallStatus.FAILED, error=str(exc), attempts=exc.attempts
        )
        run_fail(run, token, str(exc))
        return Step(StepOutcome.FAILED)
    except LeaseLost:
        buffer.flush()
        ModelCall.objects.filter(pk=model_call.pk).update(
            status=CallStatus.FAILED, error="Stopped: the run was cancelled or taken over."
        )
        raise
    except Exception as exc:
        buffer.flush()
        ModelCall.objects.filter(pk=model_call.pk).update(
            status=CallStatus.FAILED, error=f"{type(exc).__name__}: {exc}"
        )
        raise
    if completion is None:
        buffer.flush()
        run_fail(run, token, f"The model ({provider.name}) ended its answer without finishing it.")
        return Step(StepOutcome.FAILED)
    if deciding:
        completion = decision_completion(completion)
        if completion.content:
            buffer.add(completion.content)
    return _answer_store(
        run,
        token,
        model_call,
        message_id,
        completion,
        purpose=purpose,
        position=position,
        deltas=buffer.take(),
    )


def _answer_store(
    run: Run,
    token: uuid.UUID,
    model_call: ModelCall,
    message_id: uuid.UUID,
    completion: Completion,
    *,
    purpose: str,
    position: int,
    deltas: list[tuple[str, dict[str, Any]]],
) -> Step:
    """Store the answer, its ModelCall, its calls' audit rows and the step's events, at once.

    Without tool calls the answer ends the run. One call is marked running by
    this worker, which runs it next; several are queued on commit and the run
    releases its lease to them.
    """
    calls = (
        repaired_tool_calls(completion)
        if purpose in (ModelCallPurpose.TOOLS, ModelCallPurpose.DECIDE)
        else []
    )
    if completion.tool_calls and not calls:
        logger.warning("run %s: ignored tool calls in a call that offered no tools", run.pk)
    inline = len(calls) == 1 and settings.TOOLCHAT_INLINE_TOOL_CALLS
    with transaction.atomic():
        fields: dict[str, Any] = {"model_calls": run.model_calls + 1}
        if calls:
            fields["steps"] = run.steps + 1
            if not inline:
                fields["lease"] = None
        else:
            fields.update(run_end_fields(run, RunStatus.COMPLETED))
        run_write(run, token, **fields)
        message, completed = assistant_message_create(
            run=run,
            message_id=message_id,
            position=position,
            content=completion.content if (completion.content or calls) else "",
            tool_calls=calls or None,
            latency_ms=completion.latency_ms,
            model=completion.model,
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
            finish_reason=completion.finish_reason,
        )
        ModelCall.objects.filter(pk=model_call.pk).update(
            status=CallStatus.SUCCEEDED,
            response_message=message,
            finish_reason=completion.finish_reason,
            first_token_ms=completion.first_token_ms,
            latency_ms=completion.latency_ms,
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
            attempts=completion.attempts,
            model=completion.model or model_call.model,
        )
        executions = [
            execution_build(run=run, message=message, call=call, step=run.steps) for call in calls
        ]
        events = [*deltas, completed]
        if inline:
            execution_start(executions[0])
            events.append(execution_started_event(executions[0]))
        ToolExecution.objects.bulk_create(executions)
        if not calls:
            events.append(run_completed_event(run, message))
        elif not inline:
            for execution in executions:
                transaction.on_commit(functools.partial(dispatch_tool, execution.pk))
        events_publish(run=run, events=events)
    if not calls:
        return Step(StepOutcome.ANSWERED, message)
    return Step(StepOutcome.CALLS if inline else StepOutcome.PARKED, message, executions)


def assistant_message_create(
    *, run: Run, message_id: uuid.UUID, position: int, **fields: Any
) -> tuple[Message, tuple[str, dict[str, Any]]]:
    """An answer of the run at `position`, and its `message.completed` event to publish.

    The caller holds the run's lease and row lock, in the transaction that commits it.
    """
    message = Message.objects.create(
        id=message_id,
        conversation_id=run.conversation_id,
        run=run,
        position=position,
        role=Role.ASSISTANT,
        **fields,
    )
    return message, ("message.completed", {"message": message_to_api(message)})
