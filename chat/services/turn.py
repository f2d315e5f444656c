"""The turn engine: from a user message to model calls, tool calls and a final answer.

Every step is persisted before the next one starts, so the database always
says what comes next:

- no assistant message in the run yet: call the model with the tools;
- the last assistant message has tool calls that are not all answered: the
  tools are running (each as its own task); the last one to finish calls
  `run_advance` again (a latch in the database: the count of unfinished
  executions, read under the run's row lock);
- all answered: the continuation policy (chat/continuation.py) chooses a model
  call with tools, a composing call without tools, or a direct reply;
- the last assistant message has no tool calls: the run is complete.

A run is worked on by whoever holds its lease, taken with a compare-and-set
and renewed by heartbeats. A redelivered task whose run has a live lease does
nothing; one whose lease went stale (its worker died) takes over and resumes
from the rows. A finished tool call is never run again, and one that was
in flight when its worker died is run again only if its tool is idempotent;
otherwise the model is told it was interrupted.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connections, transaction
from django.db.models import DateTimeField, Max, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from chat.continuation import (
    DECISION_FORMAT,
    Action,
    decide_after_tools,
    decider_instruction,
    direct_reply,
    parse_decision,
)
from chat.dispatch import dispatch_run, dispatch_tool
from chat.events import event_publish
from chat.history import message_to_api
from chat.llm import get_provider
from chat.llm.base import (
    ChatRequest,
    Completion,
    Done,
    ProviderError,
    StreamRestart,
    TextDelta,
    ToolCall,
)
from chat.models import (
    FINISHED_EXECUTION_STATUSES,
    CallStatus,
    Conversation,
    ExecutionStatus,
    Message,
    Mode,
    ModelCall,
    ModelCallPurpose,
    Role,
    Run,
    RunEvent,
    RunStatus,
    ToolExecution,
)
from chat.selectors import history_for_model
from tools.context import ToolContext
from tools.executor import ToolResult, execute_tool, interrupted_result
from tools.registry import registry as tool_registry

logger = logging.getLogger(__name__)

WORKER = f"{socket.gethostname()}:{os.getpid()}"


NEXT, PARKED, FAILED = "next", "parked", "failed"


class LeaseLost(Exception):
    """Another worker took the run over, or the run was cancelled: stop quietly."""


# --- claiming a run -------------------------------------------------------------------


def run_claim(*, run_id: Any) -> tuple[Run, uuid.UUID] | None:
    """Take the run's lease if it is free or stale; None when someone else holds it or it ended."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.TOOLCHAT_RUN_STALE_S)
    token = uuid.uuid4()
    claimed = (
        Run.objects.filter(pk=run_id, status__in=[RunStatus.QUEUED, RunStatus.RUNNING])
        .filter(Q(lease__isnull=True) | Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=stale))
        .update(
            status=RunStatus.RUNNING,
            lease=token,
            heartbeat_at=now,
            started_at=Coalesce("started_at", Value(now, output_field=DateTimeField())),
        )
    )
    if not claimed:
        return None
    run = Run.objects.select_related("conversation", "conversation__owner").get(pk=run_id)
    return run, token


def _recheck_later(run_id: Any) -> None:
    """A delivery found the run held by someone: look again once that lease could be stale.

    This is how a run whose worker died mid-step is taken over: the broker
    redelivers its task, possibly before the lease has gone stale, and this
    check comes back when it has. If the holder is alive by then, the run has
    either ended or shows a fresh heartbeat, and the check repeats.
    """
    if settings.TOOLCHAT_TASKS_IN_PROCESS:
        return  # no redelivery without a broker: a lease held here is held by a live thread
    held = Run.objects.filter(pk=run_id, status=RunStatus.RUNNING, lease__isnull=False).values_list(
        "heartbeat_at", flat=True
    )
    heartbeat = next(iter(held), None)
    if heartbeat is None:
        return
    stale_at = heartbeat + timedelta(seconds=settings.TOOLCHAT_RUN_STALE_S)
    dispatch_run(run_id, delay_s=max(0.5, (stale_at - timezone.now()).total_seconds() + 0.5))


def tool_deadline(execution: ToolExecution) -> float:
    """Seconds after its start when a running call is presumed dead with its worker."""
    spec = tool_registry.get(execution.name)
    return (spec.timeout if spec else 60.0) + settings.TOOLCHAT_TOOL_GRACE_S


class _Heartbeat:
    """Renews the run's lease from a thread while a model call is in flight.

    A model may take long to send its first token, and the provider sleeps
    between retries: the stream yields nothing then, so the renewal cannot wait
    for it. The thread also notices a cancel (or a take-over) within a second,
    and the streaming loop stops at its next event.
    """

    def __init__(self, run: Run, token: uuid.UUID) -> None:
        self.run_id = run.pk
        self.token = token
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="toolchat-heartbeat", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # Not a long join: the thread may be waiting for a pooled connection, and
        # the step must not wait for it. It sees the stop flag and ends by itself.
        self._stop.set()
        self._thread.join(0.05)

    def check(self) -> None:
        """Raise LeaseLost if the run is no longer ours."""
        if self.lost:
            raise LeaseLost(str(self.run_id))

    def _beat(self) -> None:
        interval = min(settings.TOOLCHAT_HEARTBEAT_S, 1.0)
        renewed = time.monotonic()
        try:
            while not self._stop.wait(interval):
                still = Run.objects.filter(
                    pk=self.run_id, lease=self.token, status=RunStatus.RUNNING
                )
                if time.monotonic() - renewed >= settings.TOOLCHAT_HEARTBEAT_S:
                    alive = still.update(heartbeat_at=timezone.now())
                    renewed = time.monotonic()
                else:
                    alive = still.exists()
                if not alive and not self._stop.is_set():
                    self.lost = True
                    return
        except Exception:
            logger.exception("heartbeat of run %s failed", self.run_id)
        finally:
            connections.close_all()


def _lock(run: Run, token: uuid.UUID | None) -> Run:
    """Lock the run row for a write; with a token, check the lease is still ours."""
    locked = Run.objects.select_for_update(no_key=True).get(pk=run.pk)
    if token is not None and (locked.lease != token or locked.status != RunStatus.RUNNING):
        raise LeaseLost(str(run.pk))
    return locked


def _next_position(conversation_id: Any) -> int:
    """The next message position, under the conversation's row lock (held to commit).

    Lock order everywhere: run, then tool execution, then conversation; and
    every row lock is FOR NO KEY UPDATE, so that the foreign-key checks of
    inserts (a RunEvent or Message pointing at the run) never wait on it. A late
    tool result of an ended run and a new run's first message both take this
    lock before inserting, so they never collide on a position.
    """
    Conversation.objects.select_for_update(no_key=True).filter(pk=conversation_id).values_list(
        "pk"
    ).first()
    last = Message.objects.filter(conversation_id=conversation_id).aggregate(m=Max("position"))["m"]
    return 0 if last is None else last + 1


# --- the engine -------------------------------------------------------------------------


def run_advance(*, run_id: Any) -> None:
    """Do whatever the run needs next, as the database says; safe to call twice."""
    claimed = run_claim(run_id=run_id)
    if claimed is None:
        _recheck_later(run_id)
        return
    run, token = claimed
    try:
        # Holding the lease, no other model call of this run is in flight: one
        # still marked running belonged to a worker that died.
        ModelCall.objects.filter(run=run, status=CallStatus.RUNNING).update(
            status=CallStatus.FAILED,
            error="The worker making this call stopped before it finished.",
        )
        if not RunEvent.objects.filter(run=run, type="run.started").exists():
            event_publish(run=run, type="run.started", data={"mode": run.mode})
        _advance(run, token)
    except LeaseLost:
        logger.info("run %s: lease lost (cancelled or taken over); stopping", run.pk)
    except Exception as exc:
        logger.exception("run %s failed with an internal error", run.pk)
        _run_fail(run, token, f"Internal error while processing the run ({type(exc).__name__}).")


def _advance(run: Run, token: uuid.UUID) -> None:
    conversation = run.conversation
    model = conversation.model or settings.LLM_MODEL
    while True:
        last = (
            Message.objects.filter(run=run, role=Role.ASSISTANT)
            .order_by("-position")
            .only("id", "tool_calls", "content")
            .first()
        )
        if last is None:
            first = ModelCallPurpose.DECIDE if run.mode == Mode.LLM else ModelCallPurpose.TOOLS
            if _model_step(run, token, purpose=first, model=model) != NEXT:
                return
            continue
        if not last.tool_calls:
            _run_complete(run, token, last)
            return
        executions = list(ToolExecution.objects.filter(message=last))
        unfinished = [e for e in executions if e.status not in FINISHED_EXECUTION_STATUSES]
        if unfinished:
            if _park(run, token, unfinished):
                return
            continue
        specs = [tool_registry.get(e.name) for e in executions]
        decision = decide_after_tools(
            mode=run.mode,
            steps_done=run.steps,
            max_steps=conversation.max_steps,
            return_direct=any(spec is not None and spec.return_direct for spec in specs),
            model=model,
        )
        if decision.action == Action.DIRECT:
            _direct_step(run, token, last)
        elif decision.action in (Action.CALL_WITH_TOOLS, Action.DECIDE):
            purpose = (
                ModelCallPurpose.DECIDE
                if decision.action == Action.DECIDE
                else ModelCallPurpose.TOOLS
            )
            if _model_step(run, token, purpose=purpose, model=model) != NEXT:
                return
        elif (
            _model_step(
                run,
                token,
                purpose=ModelCallPurpose.COMPOSE,
                model=decision.model or model,
                instruction=decision.instruction,
            )
            != NEXT
        ):
            return


def _park(run: Run, token: uuid.UUID, unfinished: list[ToolExecution]) -> bool:
    """Release the run while its tools work, and (re)dispatch the calls nobody is running.

    False when, under the lock, no call is unfinished any more: the last one
    finished meanwhile (its wake-up could not claim the run we hold), so the
    caller goes on instead of waiting for a wake-up that already happened.
    """
    now = timezone.now()
    redo = []
    for execution in unfinished:
        if execution.status == ExecutionStatus.PENDING or (
            execution.status == ExecutionStatus.RUNNING
            and execution.started_at is not None
            and (now - execution.started_at).total_seconds() > tool_deadline(execution)
        ):
            redo.append(execution.pk)
    with transaction.atomic():
        _lock(run, token)
        still = (
            ToolExecution.objects.filter(pk__in=[e.pk for e in unfinished])
            .exclude(status__in=FINISHED_EXECUTION_STATUSES)
            .exists()
        )
        if not still:
            return False
        Run.objects.filter(pk=run.pk).update(lease=None, heartbeat_at=now)
        for execution_id in redo:
            transaction.on_commit(functools.partial(dispatch_tool, execution_id))
    return True


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


def _request_hash(request: ChatRequest) -> str:
    payload = {
        "model": request.model,
        "messages": request.messages,
        "tools": request.tools,
        "tool_choice": request.tool_choice,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _model_step(
    run: Run,
    token: uuid.UUID,
    *,
    purpose: str,
    model: str,
    instruction: str | None = None,
) -> str:
    """One model call, streamed to the run's events and stored.

    Returns NEXT when the engine should go on, PARKED when the answer called
    tools (the run's lease was handed back: the tools' latch resumes it), or
    FAILED.
    """
    conversation = run.conversation
    messages = history_for_model(
        conversation=conversation,
        max_messages=settings.TOOLCHAT_HISTORY_MAX_MESSAGES,
        max_chars=settings.TOOLCHAT_HISTORY_MAX_CHARS,
    )
    deciding = purpose == ModelCallPurpose.DECIDE
    if deciding:
        # No native tool calling: the tools are described in a system message and
        # the answer is a JSON decision (chat/continuation.py).
        instruction = decider_instruction(tool_registry.openai_tools())
    if instruction:
        messages.append({"role": "system", "content": instruction})
    offered = tool_registry.openai_tools() if purpose == ModelCallPurpose.TOOLS else None
    request = ChatRequest(
        model=model,
        messages=messages,
        tools=offered or None,
        tool_choice="auto" if offered else None,
        response_format=DECISION_FORMAT if deciding else None,
    )
    provider = get_provider()
    step = run.steps + 1
    message_id = uuid.uuid4()
    model_call = ModelCall.objects.create(
        run=run,
        step=step,
        purpose=purpose,
        model=model,
        provider=provider.name,
        message_count=len(messages),
        request_hash=_request_hash(request),
        tools_offered=[tool["function"]["name"] for tool in offered or []],
        started_at=timezone.now(),
    )
    event_publish(
        run=run,
        type="message.created",
        data={"message_id": str(message_id), "role": "assistant", "purpose": purpose},
    )
    buffer = _DeltaBuffer(run, message_id)
    completion: Completion | None = None
    try:
        with _Heartbeat(run, token) as heartbeat:
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
        buffer.flush()
    except ProviderError as exc:
        buffer.flush()
        ModelCall.objects.filter(pk=model_call.pk).update(
            status=CallStatus.FAILED, error=str(exc), attempts=exc.attempts
        )
        _run_fail(run, token, str(exc))
        return FAILED
    except LeaseLost:
        ModelCall.objects.filter(pk=model_call.pk).update(
            status=CallStatus.FAILED, error="Stopped: the run was cancelled or taken over."
        )
        raise
    except Exception as exc:
        ModelCall.objects.filter(pk=model_call.pk).update(
            status=CallStatus.FAILED, error=f"{type(exc).__name__}: {exc}"
        )
        raise
    if completion is None:
        _run_fail(run, token, f"The model ({provider.name}) ended its answer without finishing it.")
        return FAILED
    if deciding:
        completion = _decision_completion(completion)
        if completion.content:
            buffer.add(completion.content)
            buffer.flush()
    parked = _store_assistant(run, token, model_call, message_id, completion, purpose=purpose)
    return PARKED if parked else NEXT


def _decision_completion(completion: Completion) -> Completion:
    """Turn a decider's JSON into what a tool-calling model would have answered."""
    decision = parse_decision(completion.content)
    if decision.next_tool:
        call = ToolCall(
            id=f"call_{uuid.uuid4().hex[:24]}",
            name=decision.next_tool,
            arguments=json.dumps(decision.arguments),
        )
        return dataclasses.replace(completion, content=None, tool_calls=[call])
    text = decision.final_output or "I could not decide how to answer that."
    return dataclasses.replace(completion, content=text, tool_calls=[])


TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_CALL_ID = 128


def _tool_call_ids(completion: Completion) -> list[dict[str, Any]]:
    """The calls in OpenAI shape, with usable names and present, unique ids.

    Models do send calls without an id, with an id another call already has
    (numbered per response, "call_0"), with an id too long to store, or with
    an empty or invalid function name. Each is repaired here and logged, so
    that the call is stored, answered, and sent back to the model validly.
    """
    calls = []
    seen: set[str] = set()
    taken = set(
        ToolExecution.objects.filter(
            tool_call_id__in=[c.id for c in completion.tool_calls if c.id]
        ).values_list("tool_call_id", flat=True)
    )
    for call in completion.tool_calls:
        call_id = call.id
        if not call_id or len(call_id) > MAX_CALL_ID or call_id in seen or call_id in taken:
            new_id = f"call_{uuid.uuid4().hex[:24]}"
            problem = (
                "no"
                if not call_id
                else ("a too long" if len(call_id) > MAX_CALL_ID else "a duplicate")
            )
            logger.warning(
                "tool call %s had %s id %r; assigned %s", call.name, problem, call_id[:200], new_id
            )
            call_id = new_id
        seen.add(call_id)
        name = call.name
        if not TOOL_NAME.match(name):
            # The executor answers that no such tool exists; the name must still be
            # one the API accepts when this history is sent back.
            name = re.sub(r"[^a-zA-Z0-9_-]", "_", name)[:64] or "unnamed_tool"
            logger.warning(
                "tool call %s had the invalid name %r; stored as %r", call_id, call.name[:200], name
            )
        calls.append(
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": call.arguments},
            }
        )
    return calls


def _store_assistant(
    run: Run,
    token: uuid.UUID,
    model_call: ModelCall,
    message_id: uuid.UUID,
    completion: Completion,
    *,
    purpose: str,
) -> bool:
    """Store the answer and its ModelCall; with tool calls, release the run to them (True)."""
    calls = (
        _tool_call_ids(completion)
        if purpose in (ModelCallPurpose.TOOLS, ModelCallPurpose.DECIDE)
        else []
    )
    if completion.tool_calls and not calls:
        logger.warning("run %s: ignored tool calls in a call that offered no tools", run.pk)
    with transaction.atomic():
        locked = _lock(run, token)
        message = Message.objects.create(
            id=message_id,
            conversation_id=run.conversation_id,
            run=run,
            position=_next_position(run.conversation_id),
            role=Role.ASSISTANT,
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
        locked.model_calls += 1
        update = ["model_calls", "heartbeat_at"]
        locked.heartbeat_at = timezone.now()
        if calls:
            locked.steps += 1
            locked.lease = None
            update += ["steps", "lease"]
        locked.save(update_fields=update)
        run.steps, run.model_calls = locked.steps, locked.model_calls
        executions = ToolExecution.objects.bulk_create(
            [_execution_for(run, message, call, locked.steps) for call in calls]
        )
        event_publish(run=run, type="message.completed", data={"message": message_to_api(message)})
        for execution in executions:
            transaction.on_commit(functools.partial(dispatch_tool, execution.pk))
    return bool(calls)


def _execution_for(run: Run, message: Message, call: dict[str, Any], step: int) -> ToolExecution:
    raw = call["function"]["arguments"]
    try:
        parsed = json.loads(raw) if raw.strip() else {}
        arguments, arguments_raw = parsed, ""
    except ValueError:
        arguments, arguments_raw = None, raw
    spec = tool_registry.get(call["function"]["name"])
    if spec and isinstance(arguments, dict):
        arguments = {k: ("***" if k in spec.sensitive else v) for k, v in arguments.items()}
    return ToolExecution(
        run=run,
        message=message,
        step=step,
        tool_call_id=call["id"],
        name=call["function"]["name"][:64],
        arguments=arguments,
        arguments_raw=arguments_raw,
    )


def _direct_step(run: Run, token: uuid.UUID, last: Message) -> None:
    """End the turn with the tools' own messages: no further model call."""
    order = {call["id"]: index for index, call in enumerate(last.tool_calls or [])}
    answers = sorted(
        Message.objects.filter(run=run, role=Role.TOOL, tool_call_id__in=list(order)),
        key=lambda m: order.get(m.tool_call_id or "", 0),
    )
    text = direct_reply([answer.content or "" for answer in answers])
    message_id = uuid.uuid4()
    event_publish(
        run=run,
        type="message.created",
        data={"message_id": str(message_id), "role": "assistant", "purpose": "direct"},
    )
    event_publish(run=run, type="message.delta", data={"message_id": str(message_id), "text": text})
    with transaction.atomic():
        _lock(run, token)
        message = Message.objects.create(
            id=message_id,
            conversation_id=run.conversation_id,
            run=run,
            position=_next_position(run.conversation_id),
            role=Role.ASSISTANT,
            content=text,
            finish_reason="direct",
        )
        event_publish(run=run, type="message.completed", data={"message": message_to_api(message)})


def _finish_fields(run: Run, status: str) -> dict[str, Any]:
    now = timezone.now()
    return {
        "status": status,
        "finished_at": now,
        "latency_ms": int((now - run.created_at).total_seconds() * 1000),
        "lease": None,
        "heartbeat_at": now,
    }


def _run_complete(run: Run, token: uuid.UUID, final: Message) -> None:
    with transaction.atomic():
        _lock(run, token)
        fields = _finish_fields(run, RunStatus.COMPLETED)
        Run.objects.filter(pk=run.pk).update(**fields)
        event_publish(
            run=run,
            type="run.completed",
            data={
                "message_id": str(final.pk),
                "latency_ms": fields["latency_ms"],
                "model_calls": run.model_calls,
                "steps": run.steps,
            },
        )


def _run_fail(run: Run, token: uuid.UUID | None, error: str) -> None:
    """Mark the run failed with a readable error (if it is still ours to end)."""
    with transaction.atomic():
        locked = Run.objects.select_for_update(no_key=True).get(pk=run.pk)
        if locked.status not in (RunStatus.QUEUED, RunStatus.RUNNING):
            return
        if token is not None and locked.lease != token:
            return
        close_unfinished_calls(locked, interrupted_result)
        Run.objects.filter(pk=run.pk).update(
            error=error, **_finish_fields(locked, RunStatus.FAILED)
        )
        event_publish(run=run, type="run.failed", data={"error": error})


def close_unfinished_calls(run: Run, result_for: Callable[..., ToolResult]) -> list[ToolExecution]:
    """Answer every unfinished call of an ending run (the run row is locked by the caller).

    The history stays valid for the model, and a tool that finishes later only
    adds to its audit row (see _store_result).
    """
    unfinished = list(
        ToolExecution.objects.select_for_update(no_key=True)
        .filter(run=run)
        .exclude(status__in=FINISHED_EXECUTION_STATUSES)
        .order_by("created_at")
    )
    now = timezone.now()
    for execution in unfinished:
        result = result_for(execution.name, tool_call_id=execution.tool_call_id)
        ToolExecution.objects.filter(pk=execution.pk).update(
            status=result.status, finished_at=now, content=result.content, error=result.error
        )
        Message.objects.create(
            conversation_id=run.conversation_id,
            run=run,
            position=_next_position(run.conversation_id),
            role=Role.TOOL,
            tool_call_id=execution.tool_call_id,
            name=execution.name,
            content=result.content,
        )
    return unfinished


# --- tool calls ---------------------------------------------------------------------------


def tool_call_execute(*, execution_id: Any) -> None:
    """Run one tool call (at most once, unless its tool is idempotent) and store its result."""
    with transaction.atomic():
        execution = (
            ToolExecution.objects.select_for_update(of=("self",), no_key=True)
            .select_related("run", "run__conversation", "run__conversation__owner", "message")
            .filter(pk=execution_id)
            .first()
        )
        if execution is None:
            return
        run = execution.run
        if execution.status in FINISHED_EXECUTION_STATUSES:
            # A redelivery after the result was stored: make sure the run moved on.
            _release_latch(run, execution.message_id)
            return
        if run.status not in (RunStatus.QUEUED, RunStatus.RUNNING):
            return
        spec = tool_registry.get(execution.name)
        interrupted = False
        if execution.status == ExecutionStatus.RUNNING and execution.started_at is not None:
            # Another delivery of this call started it. Until its deadline it may
            # still be running: look again then. After it, its worker is gone.
            age = (timezone.now() - execution.started_at).total_seconds()
            if age < tool_deadline(execution):
                if not settings.TOOLCHAT_TASKS_IN_PROCESS:
                    transaction.on_commit(
                        functools.partial(
                            dispatch_tool,
                            execution.pk,
                            delay_s=tool_deadline(execution) - age + 0.5,
                        )
                    )
                return
            interrupted = spec is None or not spec.idempotent
        if not interrupted:
            execution.status = ExecutionStatus.RUNNING
            execution.started_at = timezone.now()
            execution.attempts += 1
            execution.worker = WORKER
            execution.save(update_fields=["status", "started_at", "attempts", "worker"])
            event_publish(
                run=run,
                type="tool_call.started",
                data=_execution_event(
                    execution, arguments=execution.arguments, attempt=execution.attempts
                ),
            )
    if interrupted:
        logger.warning(
            "tool call %s (%s) was in flight when its worker died; not repeating it",
            execution.tool_call_id,
            execution.name,
        )
        _store_result(
            execution.pk, interrupted_result(execution.name, tool_call_id=execution.tool_call_id)
        )
        return
    raw_arguments = next(
        (
            call["function"]["arguments"]
            for call in execution.message.tool_calls or []
            if call.get("id") == execution.tool_call_id
        ),
        "{}",
    )
    context = ToolContext(
        user=run.conversation.owner,
        conversation_id=run.conversation_id,
        run_id=run.pk,
        tool_call_id=execution.tool_call_id,
        execution_id=execution.pk,
        sink=_event_sink(run),
        tool_name=execution.name,
    )
    result = execute_tool(name=execution.name, arguments=raw_arguments, context=context)
    _store_result(execution.pk, result)


def _event_sink(run: Run) -> Callable[[str, dict[str, Any]], None]:
    def sink(event_type: str, data: dict[str, Any]) -> None:
        event_publish(run=run, type=event_type, data=data)

    return sink


def _store_result(execution_id: Any, result: ToolResult) -> None:
    """Store a tool call's result (audit row + tool message); the last one moves the run on."""
    with transaction.atomic():
        execution = ToolExecution.objects.select_related("run").get(pk=execution_id)
        run = Run.objects.select_for_update(no_key=True).get(pk=execution.run_id)
        execution = ToolExecution.objects.select_for_update(no_key=True).get(pk=execution_id)
        finished_at = timezone.now()
        fields = result.execution_fields()
        if execution.status in FINISHED_EXECUTION_STATUSES:
            # Cancelled while it ran: keep what it did for the audit, change nothing else.
            ToolExecution.objects.filter(pk=execution.pk).update(
                result=result.result,
                result_chars=result.result_chars,
                truncated=result.truncated,
                duration_ms=result.duration_ms,
                error=f"{execution.error}; the tool finished after the run ended".strip("; "),
            )
            return
        if fields["arguments"] is None:
            fields["arguments"] = execution.arguments
        fields["arguments_raw"] = fields["arguments_raw"] or execution.arguments_raw
        ToolExecution.objects.filter(pk=execution.pk).update(finished_at=finished_at, **fields)
        message = Message.objects.create(
            conversation_id=run.conversation_id,
            run=run,
            position=_next_position(run.conversation_id),
            role=Role.TOOL,
            tool_call_id=execution.tool_call_id,
            name=execution.name,
            content=result.content,
            resource_id=result.resource_id,
        )
        event_publish(
            run=run,
            type="tool_call.completed",
            data=_execution_event(
                execution,
                status=result.status,
                duration_ms=result.duration_ms,
                truncated=result.truncated,
                message=message_to_api(message),
            ),
        )
        _release_latch(run, execution.message_id)


def _execution_event(execution: ToolExecution, **fields: Any) -> dict[str, Any]:
    """The data of a tool_call.* event: which call, and what there is to say about it."""
    return {
        "execution_id": str(execution.pk),
        "tool_call_id": execution.tool_call_id,
        "name": execution.name,
        **fields,
    }


def _release_latch(run: Run, assistant_message_id: Any) -> None:
    """When no call of the step is unfinished, end the step and queue the run's next move."""
    remaining = (
        ToolExecution.objects.filter(message_id=assistant_message_id)
        .exclude(status__in=FINISHED_EXECUTION_STATUSES)
        .count()
    )
    if remaining or run.status not in (RunStatus.QUEUED, RunStatus.RUNNING):
        return
    if not RunEvent.objects.filter(
        run=run, type="tools.ended", data__message_id=str(assistant_message_id)
    ).exists():
        event_publish(run=run, type="tools.ended", data={"message_id": str(assistant_message_id)})
    transaction.on_commit(lambda: dispatch_run(run.pk))
