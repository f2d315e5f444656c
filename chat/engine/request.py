"""What a model step sends: the history, the step's instruction and tools, and its hash."""

from __future__ import annotations

import hashlib
import json
import operator
from typing import Any

from django.conf import settings

from chat.engine.continuation import DECISION_FORMAT, decider_instruction
from chat.history import RunHistory
from chat.history_rows import history_messages, model_history
from chat.llm.base import ChatRequest, forwarded_options
from chat.models import ModelCallPurpose, Run
from chat.policies import ToolPolicies
from chat.prompts import run_system_prompt
from tools.registry import registry as tool_registry


def request_hash(request: ChatRequest) -> str:
    """A hash of exactly what the model is sent: the audit's proof of the request.

    SHA-256 of the request's model, messages, tools and tool_choice as JSON
    with sorted keys (`RequestHasher` gives the same for a run's calls).
    """
    payload = {
        "model": request.model,
        "messages": request.messages,
        "tools": request.tools,
        "tool_choice": request.tool_choice,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


class RequestHasher:
    """`request_hash` for one run's model calls, each message of its history encoded once.

    A run's calls send one history that grows (chat/history.py `RunHistory`
    hands each call the same message dicts): the compose call's request
    begins with the tools call's messages. In the sorted JSON the messages
    come first (before `model`, `tool_choice`, `tools`), so the hash's state
    after a request's messages is kept, and a request that begins with those
    very messages (the same objects; nothing changes a sent message) goes on
    from it. Otherwise the messages are encoded from the first. The digest is
    `request_hash`'s, byte for byte (tests/chat/engine/test_request_hash.py).
    """

    def __init__(self) -> None:
        self._messages: list[Any] = []  # the last request's, held: their ids stay theirs
        self._state = hashlib.sha256(b'{"messages": [')

    def __call__(self, request: ChatRequest) -> str:
        messages = request.messages
        held = len(self._messages)
        prefix = messages[:held]
        if len(prefix) == held and all(map(operator.is_, prefix, self._messages)):
            state, added = self._state.copy(), messages[held:]
        else:
            state, held, added = hashlib.sha256(b'{"messages": ['), 0, messages
        if added:
            encoded = json.dumps(added, sort_keys=True)[1:-1]  # in one call, unbracketed
            state.update(((", " if held else "") + encoded).encode())
        self._messages, self._state = list(messages), state.copy()
        rest = json.dumps(
            {"model": request.model, "tool_choice": request.tool_choice, "tools": request.tools},
            sort_keys=True,
        )
        state.update(b"], " + rest[1:].encode())
        return state.hexdigest()


def history_load(run: Run) -> RunHistory:
    """The run's history for its model calls, from the rows of its conversation; kept by the run.

    The one read of a model's history (chat/history_rows.py `model_history`),
    with the prompt the run started with.
    """
    return model_history(
        conversation=run.conversation,
        system_prompt=run_system_prompt(run),
        last_position=getattr(run, "last_position", None),
    )


def request_build(
    run: Run,
    history: RunHistory,
    *,
    purpose: str,
    model: str,
    instruction: str | None,
    policies: ToolPolicies,
    theirs: frozenset[str],
) -> ChatRequest:
    """The request of a step: the history, the step's instruction, and the tools it offers.

    `policies` are the run owner's (chat/policies.py `run_policies`), read by the
    step once: a tool a policy denies this person is not offered. `theirs` are
    the names of a /v1 client's own tools (`client_tool_names`): a client's
    tool takes its name from ours for the run (chat/openai_api/answers.py).
    """
    # A /v1 client's options (chat/openai_api/) where it gave them.
    options = run.client_options or {}
    # None of ours for a /v1 client's background task (chat/openai_api/tasks.py).
    ours = policies.offered(
        tool_registry.openai_tools() if options.get("toolchat_tools", True) else []
    )
    tools = [*(t for t in ours if t["function"]["name"] not in theirs), *(run.client_tools or [])]
    messages = history_messages(history)
    deciding = purpose == ModelCallPurpose.DECIDE
    if deciding:
        # No native tool calling: the tools are described in a system message and
        # the answer is a JSON decision (chat/engine/continuation.py).
        instruction = decider_instruction(tools)
    if instruction:
        messages.append({"role": "system", "content": instruction})
    offered = tools if purpose == ModelCallPurpose.TOOLS else None
    composing = purpose == ModelCallPurpose.COMPOSE
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
        options=forwarded_options(options),
    )


def client_tool_names(run: Run) -> frozenset[str]:
    """The names of the tools a /v1 client declared for the run (it runs their calls)."""
    return frozenset(
        tool.get("function", {}).get("name", "") for tool in run.client_tools or () if tool
    )
