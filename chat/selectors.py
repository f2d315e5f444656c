"""Reads: conversations, their messages, runs, audit rows, and the history a model is sent.

Every lookup by id takes the requesting user and answers "not found" for
someone else's object: the API never has to remember to check ownership.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import Exists, F, OuterRef, Prefetch, Q, QuerySet, Subquery

from chat.exceptions import ConversationNotFound, ResourceNotFound, RunNotFound
from chat.history_rows import history_messages, model_history
from chat.models import (
    ACTIVE_RUN_STATUSES,
    Conversation,
    ExecutionStatus,
    Message,
    ModelCall,
    Role,
    Run,
    RunEvent,
    RunStatus,
    Source,
    StandingApproval,
    ToolExecution,
)
from chat.prompts import system_prompt_for
from chat.statements import model_columns
from tools.models import Resource

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser


def conversation_get(
    *, conversation_id: uuid.UUID | str, user: AbstractBaseUser | AnonymousUser
) -> Conversation:
    """The user's own conversation; ConversationNotFound for a missing or foreign one."""
    try:
        return Conversation.objects.get(pk=conversation_id, owner_id=user.pk)
    except (Conversation.DoesNotExist, ValidationError, ValueError):
        # Someone else's conversation is "not found" too: its existence is not ours to tell.
        raise ConversationNotFound("Conversation not found.") from None


def current_messages(conversation_id: Any) -> QuerySet[Message]:
    """The conversation's messages without those a regenerated or edited turn replaced."""
    return Message.objects.filter(conversation_id=conversation_id, superseded_at__isnull=True)


def message_list(
    *, conversation: Conversation, include_superseded: bool = False
) -> QuerySet[Message]:
    """The conversation's messages in order, for the API (see message_to_api).

    Replaced messages (a regenerated answer, an edited question) stay in the
    record; `include_superseded` shows them too, each with its `superseded_at`.
    """
    messages = (
        Message.objects.filter(conversation_id=conversation.pk)
        if include_superseded
        else current_messages(conversation.pk)
    )
    return messages.order_by("position")


def history_for_model(*, conversation: Conversation) -> list[dict[str, Any]]:
    """What the conversation's next model call is sent: valid OpenAI history, in its budgets.

    The engine's own read (chat/history_rows.py `model_history`), with the
    prompt a new run of the conversation would start with.
    """
    return history_messages(
        model_history(conversation=conversation, system_prompt=system_prompt_for(conversation))
    )


# --- The REST API's reads -------------------------------------------------------------


def conversation_list(
    *,
    user: AbstractBaseUser | AnonymousUser,
    search: str = "",
    replays: bool = False,
    sources: Iterable[str] | None = None,
) -> QuerySet[Conversation]:
    """The user's conversations, each annotated with `active_run_id` (one query for a page).

    `search` keeps those whose title, or a current user or assistant message,
    contains it (case-insensitive); `sources` those of the sources named. A
    replay's conversation (`replay_of`) is not one the user held: it is left
    out unless `replays`; so is a /v1 client's background task (`Source.TASK`).
    """
    active = Run.objects.filter(
        conversation_id=OuterRef("pk"), status__in=ACTIVE_RUN_STATUSES
    ).values("pk")[:1]
    conversations = Conversation.objects.filter(owner_id=user.pk).exclude(source=Source.TASK)
    if sources is not None:
        conversations = conversations.filter(source__in=list(sources))
    if not replays:
        conversations = conversations.filter(replay_of__isnull=True)
    if search:
        said = current_messages(OuterRef("pk")).filter(
            role__in=[Role.USER, Role.ASSISTANT], content__icontains=search
        )
        conversations = conversations.filter(Q(title__icontains=search) | Exists(said))
    return conversations.annotate(active_run_id=Subquery(active))


def conversation_detail(
    *, conversation_id: uuid.UUID | str, user: AbstractBaseUser | AnonymousUser
) -> Conversation:
    """One own conversation as `conversation_list` annotates it; ConversationNotFound otherwise."""
    try:
        return conversation_list(user=user, replays=True).get(pk=conversation_id)
    except (Conversation.DoesNotExist, ValidationError, ValueError):
        raise ConversationNotFound("Conversation not found.") from None


def message_list_with_executions(
    *, conversation: Conversation, include_superseded: bool = False
) -> QuerySet[Message]:
    """The conversation's messages in order; tool messages annotated with `tool_execution_id`.

    The audit row is found by its tool_call_id within this conversation (other
    conversations may use the same id: some providers number calls per
    response), in the same query as the messages.
    """
    execution = ToolExecution.objects.filter(
        tool_call_id=OuterRef("tool_call_id"), run__conversation_id=OuterRef("conversation_id")
    ).values("pk")[:1]
    # A user message's turn is the newest run it triggered (a regenerated answer's
    # included): its outcome comes along (same query), so that a page shows a
    # failed turn's error, or a finished turn's totals, on reload.
    turn = Run.objects.filter(trigger_message_id=OuterRef("pk")).order_by("-created_at")
    messages = message_list(conversation=conversation, include_superseded=include_superseded)
    return messages.select_related("resource").annotate(
        tool_execution_id=Subquery(execution),
        turn_run_id=Subquery(turn.values("pk")[:1]),
        run_status=Subquery(turn.values("status")[:1]),
        run_error=Subquery(turn.values("error")[:1]),
        run_latency_ms=Subquery(turn.values("latency_ms")[:1]),
        run_model_calls=Subquery(turn.values("model_calls")[:1]),
    )


def resource_get(
    *, resource_id: uuid.UUID | str, user: AbstractBaseUser | AnonymousUser
) -> Resource:
    """One of the user's resources (a note, a dataset); ResourceNotFound otherwise."""
    try:
        return Resource.objects.get(pk=resource_id, owner_id=user.pk)
    except (Resource.DoesNotExist, ValidationError, ValueError):
        raise ResourceNotFound("Resource not found.") from None


def run_get(*, run_id: uuid.UUID | str, user: AbstractBaseUser | AnonymousUser) -> Run:
    """A run of one of the user's conversations; RunNotFound for a missing or foreign one."""
    try:
        return Run.objects.get(pk=run_id, conversation__owner_id=user.pk)
    except (Run.DoesNotExist, ValidationError, ValueError):
        raise RunNotFound("Run not found.") from None


def run_detail(*, run_id: uuid.UUID | str, user: AbstractBaseUser | AnonymousUser) -> Run:
    """`run_get` with its model calls and tool executions prefetched (three queries)."""
    try:
        return Run.objects.prefetch_related(
            Prefetch("model_call_rows", queryset=ModelCall.objects.order_by("started_at", "step")),
            Prefetch(
                "tool_executions",
                queryset=ToolExecution.objects.annotate(
                    conversation_id=F("run__conversation_id")
                ).order_by("created_at", "tool_call_id"),
            ),
        ).get(pk=run_id, conversation__owner_id=user.pk)
    except (Run.DoesNotExist, ValidationError, ValueError):
        raise RunNotFound("Run not found.") from None


@dataclass(frozen=True)
class RunShown:
    """A run as the API shows it: its model calls (oldest first) and tool executions."""

    run: Run
    calls: list[ModelCall]
    executions: list[ToolExecution]


def run_shown(*, run_id: uuid.UUID | str, user: AbstractBaseUser | AnonymousUser) -> RunShown:
    """What `run_detail` reads, as constant statements: every `?wait=true` answer reads it.

    The ORM's get with a join and two prefetches (one annotated) cost three
    quarters of the answer's CPU to build; RunNotFound for someone else's run.
    """
    try:
        owned, calls, executions_read = _run_statements()
        found = list(Run.objects.raw(owned, [_run_pk(run_id), user.pk]))
    except (ValidationError, ValueError):
        found = []
    if not found:
        raise RunNotFound("Run not found.")
    run = found[0]
    key = [_run_pk(run.pk)]
    executions = list(ToolExecution.objects.raw(executions_read, key))
    for execution in executions:
        vars(execution)["conversation_id"] = run.conversation_id  # as run_detail annotates it
    return RunShown(run, list(ModelCall.objects.raw(calls, key)), executions)


def _run_pk(run_id: Any) -> Any:
    pk: Any = Run._meta.pk
    return pk.get_db_prep_value(pk.to_python(run_id), connection)


@functools.cache
def _run_statements() -> tuple[str, str, str]:
    """The run's, its model calls' and its tool executions' reads (`run_shown`), built once."""
    return (
        f"SELECT {model_columns(Run)} FROM chat_run"  # noqa: S608 (built from the models)
        " JOIN chat_conversation ON chat_conversation.id = chat_run.conversation_id"
        " WHERE chat_run.id = %s AND chat_conversation.owner_id = %s",
        f"SELECT {model_columns(ModelCall)} FROM chat_modelcall"  # noqa: S608
        " WHERE run_id = %s ORDER BY started_at, step",
        f"SELECT {model_columns(ToolExecution)} FROM chat_toolexecution"  # noqa: S608
        " WHERE run_id = %s ORDER BY created_at, tool_call_id",
    )


def runs_to_replay(
    *,
    run_ids: Sequence[Any] = (),
    conversation_ids: Sequence[Any] = (),
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 100,
) -> list[Run]:
    """The completed runs that can be replayed, newest first, at most `limit` (any owner:
    staff's): not replays themselves, each answering a user message."""
    runs = Run.objects.filter(
        status=RunStatus.COMPLETED, replay_of__isnull=True, trigger_message__isnull=False
    )
    if run_ids:
        runs = runs.filter(pk__in=run_ids)
    if conversation_ids:
        runs = runs.filter(conversation_id__in=conversation_ids)
    if since is not None:
        runs = runs.filter(created_at__gte=since)
    if until is not None:
        runs = runs.filter(created_at__lt=until)
    return list(runs.select_related("conversation").order_by("-created_at")[:limit])


def run_replay_list(*, run: Run) -> QuerySet[Run]:
    """The replays of a run (chat/services/replays.py), oldest first, each with its conversation."""
    return Run.objects.filter(replay_of=run).select_related("conversation").order_by("created_at")


def run_final_message(*, run: Run) -> Message | None:
    """The answer of a completed run: its last assistant message (None for any other run)."""
    if run.status != RunStatus.COMPLETED:
        return None
    return _last_answer(run)


def run_waiting_message(*, run: Run) -> Message | None:
    """The answer whose tool calls a run waits on a person for (None unless it waits)."""
    if run.status != RunStatus.AWAITING_APPROVAL:
        return None
    return _last_answer(run)


def _last_answer(run: Run) -> Message | None:
    answers = Message.objects.raw(_final_message(), [_run_pk(run.pk), Role.ASSISTANT.value])
    return next(iter(answers), None)


@functools.cache
def _final_message() -> str:
    """The run's last answer (a constant statement: read with every `?wait=true` answer)."""
    return (
        f"SELECT {model_columns(Message)} FROM chat_message"  # noqa: S608 (built from the model)
        " WHERE run_id = %s AND role = %s ORDER BY position DESC LIMIT 1"
    )


def run_user_message(*, run: Run) -> Message | None:
    """The user message a run answers (a regenerated answer's too), or None if it has none."""
    if run.trigger_message_id is not None:
        return Message.objects.filter(pk=run.trigger_message_id).first()
    return Message.objects.filter(run_id=run.pk, role=Role.USER).first()  # a history import


def stored_events(
    *,
    conversation_id: Any,
    after: int = 0,
    before: int | None = None,
    run_id: Any | None = None,
    limit: int | None = None,
) -> list[RunEvent]:
    """A conversation's stored events with after < seq (< before), oldest first.

    The one reader of RunEvent: the events endpoint, the SSE and WebSocket
    streams and their replays all read through here. With `run_id`, one run's.
    """
    events = RunEvent.objects.filter(conversation_id=conversation_id, seq__gt=after)
    if before is not None:
        events = events.filter(seq__lt=before)
    if run_id is not None:
        events = events.filter(run_id=run_id)
    events = events.order_by("seq")
    return list(events[:limit] if limit is not None else events)


def run_event_list(*, run: Run, after: int = 0, limit: int = 500) -> list[RunEvent]:
    """The run's stored events with a seq above `after`, oldest first, at most `limit`."""
    return stored_events(
        conversation_id=run.conversation_id, after=after, run_id=run.pk, limit=limit
    )


def tool_execution_list(
    *,
    user: AbstractBaseUser | AnonymousUser,
    conversation_id: uuid.UUID | None = None,
    run_id: uuid.UUID | None = None,
) -> QuerySet[ToolExecution]:
    """Audit rows of the user's own runs, optionally of one conversation or one run."""
    executions = ToolExecution.objects.filter(run__conversation__owner_id=user.pk).annotate(
        conversation_id=F("run__conversation_id")
    )
    if conversation_id is not None:
        executions = executions.filter(run__conversation_id=conversation_id)
    if run_id is not None:
        executions = executions.filter(run_id=run_id)
    return executions


def approvals_waiting(
    *, user: AbstractBaseUser | AnonymousUser, everyone: bool = False
) -> QuerySet[ToolExecution]:
    """The calls that wait for a decision: of the user's own runs, or (staff) of everyone's."""
    waiting = ToolExecution.objects.filter(status=ExecutionStatus.AWAITING_APPROVAL)
    if not everyone:
        waiting = waiting.filter(run__conversation__owner_id=user.pk)
    return waiting.select_related("run__conversation__owner").order_by("-created_at", "-id")


def standing_approval_list(*, conversation: Conversation) -> QuerySet[StandingApproval]:
    """A conversation's standing approvals in force, oldest first."""
    return conversation.standing_approvals.filter(withdrawn_at__isnull=True).order_by("id")
