"""Follow-up suggestions: two or three prompts offered as chips after a final answer.

They come from two places:

- the tools: a tool's result may carry `suggestions` (a list of short
  prompts). They are read from the tool messages the final model call was
  sent, so they cost no query, and are stored with the answer itself;
- the model, when `LLM_SUGGESTIONS` is on (the default for the offline
  model, off for a paid one; never in the `direct` mode): after the final
  answer is stored and shown, and before the run completes, one small
  structured call asks for follow-ups. It is made and recorded as every
  model call is (chat/engine/model_calls.py), as a `suggest` ModelCall; it
  counts in the run's `model_calls` as every call does, but not in its
  latency (the turn took until its answer), and its answer is merged into the final message
  and announced by `message.suggestions`, in the transaction that completes
  the run: `run.completed` stays the run's last event, and a run cancelled
  meanwhile gets none. If it fails, the answer simply has none.

Neither kind offers what the user already asked in the conversation (the
question just asked, or an earlier one): a suggestion equal to one of them,
case, spaces and a final "?" aside, is left out.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from chat.engine.lease import LeaseLost
from chat.engine.ledger import (
    message_suggestions_write,
    model_call_suggest_store,
    model_call_unreadable,
)
from chat.engine.model_calls import model_call
from chat.engine.request import history_load
from chat.history import RunHistory
from chat.history_rows import history_messages
from chat.live.event_types import Event
from chat.llm import provider_for
from chat.llm.base import SUGGESTIONS_FORMAT_NAME, ChatRequest
from chat.llm.endpoints import UnknownModel, endpoint, model_resolve
from chat.models import Message, Mode, ModelCall, ModelCallPurpose, Run

logger = logging.getLogger(__name__)

MAX_SUGGESTIONS = 3
MAX_SUGGESTION_CHARS = 120

SUGGESTIONS_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": SUGGESTIONS_FORMAT_NAME,
        "schema": {
            "type": "object",
            "properties": {
                "suggestions": {
                    "type": "array",
                    "items": {"type": "string"},
                    "maxItems": MAX_SUGGESTIONS,
                }
            },
            "required": ["suggestions"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}

SUGGESTIONS_INSTRUCTION = (
    "Suggest two or three short follow-up messages the user might send next, written as "
    "the user would type them (at most 8 words each), each one something you can answer "
    'with your tools. Reply with JSON only: {"suggestions": ["...", "..."]}.'
)


def suggestions_clean(candidates: Iterable[Any], *, asked: Iterable[str] = ()) -> list[str]:
    """At most three distinct, short, one-line prompts, none of them a question `asked`."""
    kept: list[str] = []
    seen = {_said(question) for question in asked}
    for candidate in candidates:
        if not isinstance(candidate, str):
            continue
        text = " ".join(candidate.split())
        if not text or len(text) > MAX_SUGGESTION_CHARS or "\x00" in text:
            continue
        if _said(text) in seen:
            continue
        seen.add(_said(text))
        kept.append(text)
        if len(kept) == MAX_SUGGESTIONS:
            break
    return kept


def _said(text: str) -> str:
    """A message as suggestions are compared with it: case, spaces and a final "?" aside."""
    return " ".join(text.split()).casefold().rstrip("?.! ")


def user_questions(messages: Iterable[dict[str, Any]]) -> list[str]:
    """What the user asked in the conversation: its user messages' text."""
    return [
        str(message["content"])
        for message in messages
        if message.get("role") == "user" and isinstance(message.get("content"), str)
    ]


def tool_suggestions(messages: Iterable[dict[str, Any]]) -> list[str]:
    """The `suggestions` the tools of the current turn returned (after the last user message)."""
    turn: list[dict[str, Any]] = []
    asked: list[str] = []
    for message in messages:
        if message.get("role") == "user":
            turn = []
            asked.extend(user_questions([message]))
        elif message.get("role") == "tool":
            turn.append(message)
    found: list[Any] = []
    for message in turn:
        try:
            result = json.loads(str(message.get("content") or ""))
        except ValueError:
            continue
        if isinstance(result, dict) and isinstance(result.get("suggestions"), list):
            found.extend(result["suggestions"])
    return suggestions_clean(found, asked=asked)


def model_suggestions_wanted(run: Run) -> bool:
    """Whether to ask the model for follow-ups: LLM_SUGGESTIONS (`auto`: offline only).

    Never in the `direct` mode, which promises no model call after the first, nor
    for a /v1 client.
    """
    if run.mode == Mode.DIRECT or run.client_options is not None:
        return False  # (a /v1 client has nowhere to show them)
    wanted = settings.LLM_SUGGESTIONS
    if wanted == "auto":
        try:
            return endpoint(model_resolve(run.conversation.model).provider).offline
        except UnknownModel:
            return False
    return bool(wanted == "on")


@dataclass
class Suggested:
    """The follow-ups call, made: its audit row to store, and the merged list.

    It counts among the run's model calls whatever became of it.
    """

    model_call: ModelCall | None  # None when the call failed: its row is stored already
    suggestions: list[str] | None  # None when the call failed or added nothing


def model_suggestions_ask(
    *, run: Run, token: uuid.UUID, final: Message, history: RunHistory | None
) -> Suggested | None:
    """Ask the model for follow-ups to the run's final answer (nothing is written yet).

    `history` is the one the run loop keeps (the answer not yet in it), or
    None to read it (bounded as every model call's is). The run still holds
    its lease: its heartbeat keeps it while the model answers, and a cancel
    ends the call (LeaseLost). None when no call was made; a call that fails
    is stored failed at once (chat/engine/model_calls.py); an answer that is
    not the JSON asked for comes back as a failed call, stored with the
    completion.
    """
    if not final.content:
        return None
    if history is None:
        history = history_load(run)  # the answer is stored: read back with the rest
    else:
        history.append(final)
    try:
        provider, choice = provider_for(run.conversation.model)
    except UnknownModel:
        return None  # the turn's own calls said so
    messages = history_messages(history)
    messages.append({"role": "system", "content": SUGGESTIONS_INSTRUCTION})
    request = ChatRequest(
        model=choice.model,
        messages=messages,
        response_format=SUGGESTIONS_FORMAT,
        max_tokens=120,
    )
    try:
        called = model_call(
            run,
            token,
            request,
            provider=provider,
            purpose=ModelCallPurpose.SUGGEST,
            step=run.steps + 1,  # the final answer's step (as `step_open` numbers it)
        )
    except LeaseLost:
        raise
    except Exception as exc:  # stored failed (and counted); a nicety never fails the run
        logger.warning("run %s: no follow-up suggestions from the model: %s", run.pk, exc)
        return None
    if called.completion is None:
        logger.warning("run %s: no follow-up suggestions from the model: %s", run.pk, called.error)
        return Suggested(None, None)
    row = called.row
    try:
        parsed = json.loads(called.completion.content or "")
        found = suggestions_clean(parsed.get("suggestions") or [], asked=user_questions(messages))
    except (ValueError, AttributeError, TypeError) as exc:
        logger.warning("run %s: the model's follow-up suggestions are unreadable: %s", run.pk, exc)
        model_call_unreadable(row, f"{type(exc).__name__}: {exc}")
        return Suggested(row, None)
    merged = suggestions_clean([*(final.suggestions or []), *found], asked=user_questions(messages))
    return Suggested(row, merged if merged and merged != final.suggestions else None)


def model_suggestions_write(
    *, run: Run, final: Message, suggested: Suggested | None
) -> list[Event]:
    """Store the call and the merged suggestions; the `message.suggestions` event to publish.

    In the transaction that completes the run, after its lease was checked:
    a run cancelled meanwhile stores and announces none of it.
    """
    if suggested is None:
        return []
    if suggested.model_call is not None:
        model_call_suggest_store(suggested.model_call)
    if suggested.suggestions is None:
        return []
    return [message_suggestions_write(final, suggested.suggestions)]
