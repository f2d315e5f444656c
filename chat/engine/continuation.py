"""Continuation policies: what follows a step of tool calls.

After the tools of a step have all answered, the run asks its policy for the
next action. The policy only decides; the turn engine (chat/engine/run.py)
does the work. The policies, chosen by the conversation's mode:

- `two_pass`: one more model call, without tools, with an instruction to answer
  naturally. At most two model calls per run.
- `loop`: call the model with tools again until it answers without tool calls or
  `max_steps` model steps are done; then one last call without tools, so the
  user always gets an answer.
- `direct`: no further model call; the reply is the tools' `message` fields.
- `llm`: for models without native tool calling. Each step is a structured-output
  call (a JSON Schema response format) that returns `{done, next_tool, arguments,
  final_output}`; a chosen tool runs like any tool call, and the decider is asked
  again, up to `max_steps` tool steps, then one last call without tools.

Whatever the mode, a tool declared `return_direct=True` ends the turn the
`direct` way, when its call succeeded (chat/engine/run.py decides that).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from chat.llm.endpoints import compose_model_default, default_model
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
    DECIDE = "decide"
    COMPOSE = "compose"
    DIRECT = "direct"


DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "done": {
            "type": "boolean",
            "description": "true when no further tool is needed and final_output answers the user",
        },
        "next_tool": {
            "type": ["string", "null"],
            "description": "the name of the tool to run next, when done is false",
        },
        "arguments": {
            "type": "object",
            "description": "the arguments for next_tool, as its parameters schema describes",
        },
        "final_output": {
            "type": ["string", "null"],
            "description": "the reply to the user, when done is true",
        },
    },
    "required": ["done", "next_tool", "arguments", "final_output"],
}

DECISION_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {"name": "continuation_decision", "schema": DECISION_SCHEMA},
}


def decider_instruction(tools: list[dict[str, Any]]) -> str:
    """The system message of a decider call: the tools, and the shape of the answer."""
    listed = json.dumps([tool["function"] for tool in tools], ensure_ascii=False)
    return (
        "Decide the next step for the user's last request. You may run one of these tools "
        f"(JSON Schemas of their parameters): <tools>{listed}</tools>\n"
        "Answer only with a JSON object {done, next_tool, arguments, final_output}. To run a "
        "tool: done=false, next_tool=its name, arguments=its arguments, final_output=null. "
        "When the results in the conversation already answer the request, or no tool "
        "helps: done=true, next_tool=null, arguments={}, final_output=your reply to the user, "
        "in plain language, without tool names or ids."
    )


@dataclass(frozen=True)
class ParsedDecision:
    """A decider's answer, checked: either a tool to run or a final reply."""

    next_tool: str | None
    arguments: dict[str, Any]
    final_output: str | None


def parse_decision(content: str | None) -> ParsedDecision:
    """Read a decider's JSON; anything that is not a valid decision becomes the reply itself."""
    text = (content or "").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return ParsedDecision(None, {}, text or None)
    if not isinstance(data, dict):
        return ParsedDecision(None, {}, text or None)
    next_tool = data.get("next_tool")
    arguments = data.get("arguments")
    if not data.get("done") and isinstance(next_tool, str) and next_tool.strip():
        return ParsedDecision(
            next_tool.strip(), arguments if isinstance(arguments, dict) else {}, None
        )
    final = data.get("final_output")
    return ParsedDecision(None, {}, final if isinstance(final, str) and final.strip() else None)


@dataclass(frozen=True)
class Decision:
    """The next action, and for model calls the model and the final instruction."""

    action: Action
    instruction: str | None = None
    model: str | None = None


def compose_model(conversation_model: str) -> str:
    """The model that writes final answers: LLM_COMPOSE_MODEL when set (a cheaper one)."""
    return compose_model_default() or conversation_model or default_model()


def decide_after_tools(
    *, mode: str, steps_done: int, max_steps: int, return_direct: bool, model: str
) -> Decision:
    """Choose what follows a step whose tool calls have all been answered."""
    if return_direct or mode == Mode.DIRECT:
        return Decision(Action.DIRECT)
    if mode == Mode.LLM:
        if steps_done < max_steps:
            return Decision(Action.DECIDE, model=model)
        return Decision(Action.COMPOSE, STEP_LIMIT_INSTRUCTION, compose_model(model))
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
