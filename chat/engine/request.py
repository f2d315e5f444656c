"""What a model step sends: the history, the step's instruction and tools, and its hash."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.conf import settings

from chat.engine.continuation import DECISION_FORMAT, decider_instruction
from chat.history import RunHistory
from chat.history_rows import history_kept
from chat.llm.base import ChatRequest
from chat.models import ModelCallPurpose, Run
from chat.prompts import run_system_prompt
from tools.registry import registry as tool_registry


def request_hash(request: ChatRequest) -> str:
    """A hash of exactly what the model is sent: the audit's proof of the request."""
    payload = {
        "model": request.model,
        "messages": request.messages,
        "tools": request.tools,
        "tool_choice": request.tool_choice,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def history_load(run: Run) -> RunHistory:
    """The run's history for its model calls, from the rows of its conversation; kept by the run.

    Read with as few rows as give what trimming the whole conversation gives
    (`history_kept`): for a long conversation, the budget and a quarter.
    """
    return history_kept(
        conversation=run.conversation,
        system_prompt=run_system_prompt(run),
        max_messages=settings.TOOLCHAT_HISTORY_MAX_MESSAGES,
        max_chars=settings.TOOLCHAT_HISTORY_MAX_CHARS,
        last_position=getattr(run, "last_position", None),
    )


def history_messages(history: RunHistory) -> list[dict[str, Any]]:
    """The history as a model call sends it: trimmed to the budgets (a new list)."""
    return history.messages(
        max_messages=settings.TOOLCHAT_HISTORY_MAX_MESSAGES,
        max_chars=settings.TOOLCHAT_HISTORY_MAX_CHARS,
    )


def request_build(
    run: Run, history: RunHistory, *, purpose: str, model: str, instruction: str | None
) -> ChatRequest:
    """The request of a step: the history, the step's instruction, and the tools it offers."""
    messages = history_messages(history)
    deciding = purpose == ModelCallPurpose.DECIDE
    tools = [*tool_registry.openai_tools(), *(run.client_tools or [])]
    if deciding:
        # No native tool calling: the tools are described in a system message and
        # the answer is a JSON decision (chat/engine/continuation.py).
        instruction = decider_instruction(tools)
    if instruction:
        messages.append({"role": "system", "content": instruction})
    offered = tools if purpose == ModelCallPurpose.TOOLS else None
    composing = purpose == ModelCallPurpose.COMPOSE
    # A /v1 client's own options (chat/openai_api/) where it gave them.
    options = run.client_options or {}
    return ChatRequest(
        model=model,
        messages=messages,
        tools=offered or None,
        tool_choice=(options.get("tool_choice") or "auto") if offered else None,
        response_format=DECISION_FORMAT if deciding else options.get("response_format"),
        max_tokens=options.get("max_tokens")
        or (settings.LLM_COMPOSE_MAX_TOKENS if composing else settings.LLM_MAX_TOKENS),
        temperature=options.get(
            "temperature", settings.LLM_COMPOSE_TEMPERATURE if composing else None
        ),
    )


def client_tool_names(run: Run) -> frozenset[str]:
    """The names of the tools a /v1 client declared for the run (it runs their calls)."""
    return frozenset(
        tool.get("function", {}).get("name", "") for tool in run.client_tools or () if tool
    )
