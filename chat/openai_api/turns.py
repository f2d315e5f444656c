"""A /v1 request's turn started: its conversation found or made, what it adds stored, the run.

Chat Completions and Responses requests both come here once read into a
`CompletionRequest` and the messages' normal form (chat/openai_api/threads.py):
one code path from a request to a stored, audited run.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from django.db import transaction

from chat.exceptions import ImagesRefused
from chat.llm import model_refuses_images
from chat.llm.limits import images_refusal
from chat.models import Conversation, Mode, Run, Source
from chat.openai_api.answers import DEFAULT_MODE, CompletionRequest
from chat.openai_api.tasks import client_task
from chat.openai_api.threads import (
    ClientMessage,
    conversation_ref,
    digests,
    retry_of_failed,
    system_prompt_read,
    thread_find,
    thread_saw,
    turn_read,
)
from chat.services.client_turns import ClientTurn, client_run_regenerate, client_run_start
from chat.services.conversations import conversation_create, conversation_update


@dataclasses.dataclass(frozen=True)
class Started:
    """A started turn: its run and conversation, the request and its messages."""

    run: Run
    conversation: Conversation
    request: CompletionRequest
    messages: list[ClientMessage]
    after: int = 0  # the conversation's event cursor from which the turn's events are its own
    # A time.monotonic() from before the run was dispatched (chat/live/run_wait.py), or None.
    begun: float | None = None


def turn_start(
    user: Any,
    request: CompletionRequest,
    messages: list[ClientMessage],
    meta: dict[str, Any],
    *,
    continues: Conversation | None = None,
    images_field: str = "messages",
) -> Started:
    """Find or make the request's conversation, store what it adds and start the run.

    `continues` names the conversation outright (a Responses request's
    `previous_response_id`): every message is new to it, and the digest of what
    its client saw is cleared, since that client no longer sends the history.
    """
    begun = time.monotonic()
    images_check(request.model, messages, field=images_field)
    task = client_task(messages) if continues is None else ""
    if task:
        return _task_start(user, request, messages, task, begun)
    conversation: Conversation | None
    with transaction.atomic():
        if continues is not None:
            conversation, held = continues, 0
            thread_saw(continues, [])
        else:
            ref = conversation_ref(meta, request.metadata)
            conversation, held = thread_find(user, digests(messages), ref)
        if conversation is not None and retry_of_failed(messages, held):
            # The request of a turn that failed, sent again: that turn is answered again.
            _conversation_follow(conversation, request, messages)
            retry = ClientTurn(
                history=[],
                results=[],
                content=messages[-1].content,
                tools=request.tools,
                options=request.options,
            )
            run = client_run_regenerate(conversation=conversation, turn=retry)
            return Started(run, conversation, request, messages, begun=begun)
        turn = turn_read(conversation, messages, held, tools=request.tools, options=request.options)
        if conversation is None:
            conversation = _conversation_new(user, request, messages, meta, turn)
            run = client_run_start(conversation=conversation, turn=turn, new=True)
        else:
            _conversation_follow(conversation, request, messages)
            run = client_run_start(conversation=conversation, turn=turn)
    return Started(run, conversation, request, messages, begun=begun)


def images_check(model: str, messages: list[ClientMessage], *, field: str) -> None:
    """Refuse a new message with images for a model known to refuse them, before storing it.

    `field` is the request's name for its messages (`messages`, or Responses' `input`).
    """
    if messages and messages[-1].images and model_refuses_images(model):
        raise ImagesRefused(images_refusal(model), field=field)


def _task_start(
    user: Any, request: CompletionRequest, messages: list[ClientMessage], task: str, begun: float
) -> Started:
    """A client's background task: its own conversation, and none of toolchat's tools."""
    turn = turn_read(
        None,
        messages,
        0,
        tools=request.tools,
        options={**request.options, "toolchat_tools": False},
    )
    with transaction.atomic():
        conversation = conversation_create(
            owner=user,
            title=conversation_title(task),
            mode=Mode.LOOP,
            system_prompt=system_prompt_read(messages),
            model=request.model,
            source=Source.TASK,
        )
        run = client_run_start(conversation=conversation, turn=turn, new=True)
    return Started(run, conversation, request, messages, begun=begun)


def _conversation_new(
    user: Any,
    request: CompletionRequest,
    messages: list[ClientMessage],
    meta: dict[str, Any],
    turn: ClientTurn,
) -> Conversation:
    conversation = conversation_create(
        owner=user,
        title=conversation_title(turn.content or ""),
        mode=request.mode or DEFAULT_MODE,
        system_prompt=system_prompt_read(messages),
        model=request.model,
        source=Source.V1,
    )
    ref = conversation_ref(meta, request.metadata)
    if ref:
        conversation.client_ref = ref
        conversation.save(update_fields=["client_ref"])
    return conversation


def _conversation_follow(
    conversation: Conversation, request: CompletionRequest, messages: list[ClientMessage]
) -> None:
    """The request's mode, system prompt and model, taken by the conversation it continues."""
    conversation_update(
        conversation=conversation,
        mode=request.mode,
        system_prompt=system_prompt_read(messages),
        model=request.model,
    )


def conversation_title(content: str) -> str:
    """A conversation's title from its first message: its words, at most 80 characters."""
    words = " ".join(content.split())
    return words if len(words) <= 80 else words[:79] + "…"
