"""How the staff pages (the /audit/ pages and the admin) show stored JSON and tool calls.

Both show the same values; they differ only in markup (a template in one, format_html
in the other), so the text is made here once and each escapes it its own way.
"""

from __future__ import annotations

import json
from typing import Any

from chat.models import Message, ToolExecution
from tools.audit import MASK, mask_arguments, masked_tool_calls
from tools.registry import registry

# How much of the user's message that began a run a row of runs shows (cut by the database).
QUESTION_CHARS = 160


def figure_text(value: float | int | None) -> str:
    """1,234: how the staff pages write a number (whole, thousands separated); "—" for none."""
    if value is None:
        return "—"
    return f"{round(float(value)):,}"


def pretty_json(value: Any) -> str:
    """A JSON value indented for reading, unescaped; "" for None (nothing stored)."""
    if value is None:
        return ""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def shown_tool_calls(message: Message) -> list[dict[str, Any]]:
    """An assistant message's tool calls as staff see them: sensitive argument values masked."""
    # The history codec only stores objects here; skipping anything else keeps a page
    # about a hand-edited row readable rather than a 500.
    calls = [call for call in message.tool_calls or [] if isinstance(call, dict)]
    return masked_tool_calls(calls) or []


def shown_arguments(execution: ToolExecution) -> tuple[dict[str, Any] | None, str]:
    """A call's stored (arguments, arguments_raw) as staff see them: masked once more.

    The row was masked when it was stored; masking again with the tool's sensitive
    parameters as registered now also covers a row stored before a parameter was
    marked sensitive.
    """
    spec = registry.get(execution.name)
    sensitive = spec.sensitive if spec is not None else frozenset()
    arguments = execution.arguments
    shown = mask_arguments(arguments, sensitive) if isinstance(arguments, dict) else arguments
    raw = MASK if sensitive and execution.arguments_raw else execution.arguments_raw
    return shown, raw


def shown_event_data(data: Any) -> Any:
    """A run event's data as staff see it: a tool call's arguments in it masked once more."""
    if not isinstance(data, dict) or not isinstance(data.get("arguments"), dict):
        return data
    spec = registry.get(str(data.get("name") or ""))
    if spec is None or not spec.sensitive:
        return data
    return {**data, "arguments": mask_arguments(data["arguments"], spec.sensitive)}
