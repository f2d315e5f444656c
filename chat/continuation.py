"""Continuation policies: what follows a step of tool calls.

After the tools of a step have all answered, the run asks its policy for the
next action. The policy only decides; the turn engine (chat/services/turn.py)
does the work. The policies, chosen by the conversation's mode:

- `two_pass`: one more model call, without tools, with an instruction to answer
  naturally. At most two model calls per run.
- `loop`: call the model with tools again until it answers without tool calls or
  `max_steps` model steps are done; then one last call without tools, so the
  user always gets an answer.
- `direct`: no further model call; the reply is the tools' `message` fields.

Whatever the mode, a tool declared `return_direct=True` ends the turn the
`direct` way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.conf import settings

from chat.models import Mode

COMPOSE_INSTRUCTION = (
    "The tool calls above have already run, and their results are in the conversation. "
    "Now reply to the user's last message in plain, natural language: say what was done "
    "and answer what they asked, using the results. Do not mention tool names, function "
    "names or call ids, and do not paste raw JSON unless it helps."
)

STEP_LIMIT_INSTRUCTION = (
    "You have used every tool step this request is allowed. Do not call more tools: "
    "reply to the user now with what the results above tell you, and say plainly if "
    "something could not be finished."
)


class Action(StrEnum):
    CALL_WITH_TOOLS = "call_with_tools"
    COMPOSE = "compose"
    DIRECT = "direct"


@dataclass(frozen=True)
class Decision:
    """The next action, and for model calls the model and the final instruction."""

    action: Action
    instruction: str | None = None
    model: str | None = None


def compose_model(conversation_model: str) -> str:
    """The model that writes final answers: LLM_COMPOSE_MODEL when set (a cheaper one)."""
    return settings.LLM_COMPOSE_MODEL or conversation_model or settings.LLM_MODEL


def decide_after_tools(
    *, mode: str, steps_done: int, max_steps: int, return_direct: bool, model: str
) -> Decision:
    """Choose what follows a step whose tool calls have all been answered."""
    if return_direct or mode == Mode.DIRECT:
        return Decision(Action.DIRECT)
    if mode == Mode.LOOP:
        if steps_done < max_steps:
            return Decision(Action.CALL_WITH_TOOLS, model=model)
        return Decision(Action.COMPOSE, STEP_LIMIT_INSTRUCTION, compose_model(model))
    return Decision(Action.COMPOSE, COMPOSE_INSTRUCTION, compose_model(model))


def direct_reply(tool_contents: list[str]) -> str:
    """The text of a `direct` turn: each tool's `message` field, or a plain summary."""
    parts: list[str] = []
    for content in tool_contents:
        try:
            data: Any = json.loads(content)
        except ValueError:
            parts.append(content.strip())
            continue
        if isinstance(data, dict) and isinstance(data.get("message"), str) and data["message"]:
            parts.append(data["message"])
        elif isinstance(data, dict) and data.get("success") is False:
            parts.append(f"That did not work: {data.get('error') or 'unknown error'}")
        elif isinstance(data, str):
            parts.append(data)
        else:
            parts.append(json.dumps(data, ensure_ascii=False)[:2000])
    text = "\n".join(part for part in parts if part)
    return text or "Done."
