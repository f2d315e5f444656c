"""Replays: run a stored turn again, on another model, in a conversation of its own.

`run_replay` makes the replay: a conversation owned by the original's owner,
linked to the run it replays (`replay_of`, on the conversation and on the
run), holding a copy of the history the original run was sent, in the same
positions; and a queued run whose system prompt, mode and client options are
the original's unless the request changes them. The engine then runs it as
any run (chat/engine/), so its first model request carries exactly the
history and tools the original's first request carried, with the chosen
model. What differs is said by the run's two fields:

- `replay_tools`: `recorded` (the default) serves each tool call from the
  original's record and runs nothing (chat/engine/replay_tools.py); `live`
  runs the tools for real, approval rules included.
- `replay_mode`: `free` (the default) lets the new model run the turn its own
  way; `forced` sends it, at each step of the original, the original's
  history up to that step and runs no tool (chat/engine/forced_replay.py), so
  the copy also holds the original turn's calls and their results.

Everything is checked before anything is stored; it is stored in one
transaction, and the run is queued when it commits.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction
from django.db.models import Q

from chat.engine.dispatch import dispatch_run
from chat.exceptions import Conflict, InvalidInput
from chat.models import (
    ACTIVE_RUN_STATUSES,
    Conversation,
    Message,
    Mode,
    ReplayMode,
    ReplayTools,
    Role,
    Run,
)
from chat.prompts import run_system_prompt
from chat.services.conversations import TITLE_MAX_LENGTH, model_chosen, settings_check
from chat.telemetry.propagation import turn_trace_parent

# What a copied message keeps of the original (its id, conversation and run are the copy's).
_COPIED = (
    "position",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "name",
    "resource_id",
    "latency_ms",
    "model",
    "prompt_tokens",
    "completion_tokens",
    "finish_reason",
    "suggestions",
    "reasoning",
)


def run_replay(
    *,
    run: Run,
    model: str,
    tools: str = ReplayTools.RECORDED,
    replay: str = ReplayMode.FREE,
    system_prompt: str | None = None,
    mode: str | None = None,
) -> Run:
    """Replay `run` on `model` in a new conversation of the same owner; the queued replay run.

    InvalidInput names the field at fault (nothing is stored); Conflict when
    the run has not ended or has no user message to answer again.
    """
    _replay_check(model=model, tools=tools, replay=replay, system_prompt=system_prompt, mode=mode)
    chosen = model_chosen(model) or ""
    original = Run.objects.select_related("conversation").get(pk=run.pk)
    _replayable_check(original)
    source = original.conversation
    prompt = run_system_prompt(original) if system_prompt is None else system_prompt
    with transaction.atomic():
        conversation = Conversation.objects.create(
            owner_id=source.owner_id,
            title=f"Replay on {chosen}: {source.title}"[:TITLE_MAX_LENGTH].rstrip(),
            mode=mode or original.mode,
            max_steps=source.max_steps,
            model=chosen,
            system_prompt=prompt,
            replay_of=original,
        )
        replay_id = uuid.uuid4()
        copies = _history_copy(
            original, conversation, replay_id, forced=replay == ReplayMode.FORCED
        )
        trigger = next(m for m in copies if m.run_id == replay_id)
        replica = Run.objects.create(
            id=replay_id,
            conversation=conversation,
            mode=conversation.mode,
            system_prompt=prompt,
            trace_parent=turn_trace_parent(),
            trigger_message_id=trigger.pk,
            client_tools=original.client_tools,
            client_options=original.client_options,
            replay_of=original,
            replay_tools=tools,
            replay_mode=replay,
        )
        Message.objects.bulk_create(copies)
        transaction.on_commit(lambda: dispatch_run(replica.pk))
    return replica


def _replayable_check(run: Run) -> None:
    """Conflict when the run cannot be replayed: it has not ended, or answers no user message."""
    if run.status in ACTIVE_RUN_STATUSES:
        raise Conflict(
            f"The run is still {run.status}; a run can be replayed once it has ended.",
            details={"run_id": str(run.pk), "status": run.status},
        )
    if run.trigger_message_id is None:
        raise Conflict(
            "The run answers no user message, so there is no turn to replay.",
            details={"run_id": str(run.pk)},
        )


def _replay_check(
    *, model: str, tools: str, replay: str, system_prompt: str | None, mode: str | None
) -> None:
    """Refuse a bad request before anything is stored, naming the field at fault."""
    if not isinstance(model, str) or not model.strip():
        raise InvalidInput("model is required: the model to replay the run on.", field="model")
    if tools not in ReplayTools.values:
        raise InvalidInput(
            f"tools must be one of {', '.join(ReplayTools.values)}, not {tools!r}.", field="tools"
        )
    if replay not in ReplayMode.values:
        raise InvalidInput(
            f"replay must be one of {', '.join(ReplayMode.values)}, not {replay!r}.",
            field="replay",
        )
    if replay == ReplayMode.FORCED and tools != ReplayTools.RECORDED:
        raise InvalidInput(
            "A forced replay runs no tool: its tools are the recorded ones.", field="tools"
        )
    if mode is not None and mode not in Mode.values:
        raise InvalidInput(
            f"mode must be one of {', '.join(Mode.values)}, not {mode!r}.", field="mode"
        )
    if system_prompt is not None and "\x00" in system_prompt:
        raise InvalidInput("system_prompt contains a NUL character.", field="system_prompt")
    settings_check(system_prompt=system_prompt, model=model)


def _history_copy(
    original: Run, conversation: Conversation, replay_id: uuid.UUID, *, forced: bool
) -> list[Message]:
    """The (unsaved) copies of what the original run's first model call was built from.

    The conversation's messages up to the run's user message, as they stood
    when the run began (without those superseded before it, with those
    superseded since), in their positions; for a forced replay, also the
    original turn's answers and tool results but its last answer. The copy of
    the user message belongs to the replay run.
    """
    trigger = Message.objects.only("position").get(pk=str(original.trigger_message_id))
    visible = Q(superseded_at__isnull=True) | Q(superseded_at__gt=original.created_at)
    reach = Q(position__lte=trigger.position)
    if forced:
        reach |= Q(run_id=original.pk)
    rows = list(
        Message.objects.filter(visible & reach, conversation_id=original.conversation_id).order_by(
            "position"
        )
    )
    if forced:
        rows = _without_final_answer(rows, original)
    copies = []
    for row in rows:
        fields: dict[str, Any] = {name: getattr(row, name) for name in _COPIED}
        mine = row.pk == original.trigger_message_id
        copies.append(
            Message(
                conversation=conversation,
                run_id=replay_id if mine else None,
                **fields,
            )
        )
    return copies


def _without_final_answer(rows: list[Message], original: Run) -> list[Message]:
    """The rows without the original run's last answer (the one a forced replay asks again)."""
    answers = [m for m in rows if m.run_id == original.pk and m.role == Role.ASSISTANT]
    if answers and not answers[-1].tool_calls:
        return [m for m in rows if m.pk != answers[-1].pk]
    return rows


def runs_replay(*, runs: list[Run], models: list[str], tools: str, replay: str) -> list[Run]:
    """Replay each run on each model (the audit's batch); the queued replays.

    The batch starts whole or not at all: every choice and every run is
    checked before the first replay is stored (InvalidInput, or Conflict
    naming the first run that cannot be replayed: one that has not ended,
    answers no user message, or is a replay itself), and all are stored in
    one transaction, queued when it commits. The queue's workers bound how
    many run at once.
    """
    for model in models:
        _replay_check(model=model, tools=tools, replay=replay, system_prompt=None, mode=None)
    for run in runs:
        try:
            if run.replay_of_id is not None:
                raise Conflict("It is a replay itself; a batch replays the users' own runs.")
            _replayable_check(run)
        except Conflict as exc:
            raise Conflict(
                f"Run {run.pk} cannot be replayed, so nothing was started: {exc.message}",
                details={"run_id": str(run.pk)},
            ) from None
    with transaction.atomic():
        return [
            run_replay(run=run, model=model, tools=tools, replay=replay)
            for run in runs
            for model in models
        ]
