"""What a model answered, made storable: a decider's JSON as a call, and calls repaired."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import uuid
from collections.abc import Set
from typing import Any

from chat.engine.continuation import parse_decision
from chat.llm.base import Completion, ToolCall
from tools.fields import storable_text
from tools.spec import TOOL_NAME_RE

logger = logging.getLogger(__name__)

# Longer ids are models misbehaving; the column holds 128 characters.
MAX_CALL_ID = 128


def decision_completion(completion: Completion) -> Completion:
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


def storable_call_ids(completion: Completion) -> Completion:
    """The answer with its calls' ids as they will be stored (NUL and lone surrogates replaced).

    Ids are cleaned once, here, where they enter: every later comparison (a
    duplicate in the step, an id stored before) then sees the stored form.
    """
    if not any(call.id and storable_text(call.id) != call.id for call in completion.tool_calls):
        return completion
    calls = [
        dataclasses.replace(call, id=storable_text(call.id)) if call.id else call
        for call in completion.tool_calls
    ]
    return dataclasses.replace(completion, tool_calls=calls)


def repaired_tool_calls(
    completion: Completion, *, taken: Set[str] = frozenset()
) -> list[dict[str, Any]]:
    """The answer's calls in OpenAI shape, with usable names and present, unique ids.

    Models do send calls without an id, with an id another call already has
    (numbered per response, "call_0"; `taken` holds those stored before), with
    an id too long to store, or with an empty or invalid function name. Each is
    repaired here and logged, so that the call is stored, answered, and sent
    back to the model validly.
    """
    calls = []
    seen: set[str] = set()
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
        if not TOOL_NAME_RE.match(name):
            # The executor answers that no such tool exists; the name must still be
            # one the API accepts when this history is sent back.
            name = re.sub(r"[^a-zA-Z0-9_-]", "_", name)[:64] or "unnamed_tool"
            logger.warning(
                "tool call %s had the invalid name %r; stored as %r", call_id, call.name[:200], name
            )
        calls.append(dataclasses.replace(call, id=call_id, name=name).to_openai())
    return calls
