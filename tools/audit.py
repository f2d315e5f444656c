"""What the audit keeps of a call's arguments: everything, but sensitive values masked.

A tool names its sensitive parameters (`@tool(sensitive=...)`); their values
never reach an audit row, an event, the admin or a log line. Every place that
shows or stores arguments goes through here, so the rule is written once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tools.registry import ToolRegistry
from tools.registry import registry as default_registry

MASK = "***"


def mask_arguments(arguments: Mapping[str, Any], sensitive: frozenset[str]) -> dict[str, Any]:
    """The arguments with the values of sensitive parameters replaced by ***."""
    return {key: MASK if key in sensitive else value for key, value in arguments.items()}


def audit_form(
    decoded: Any, text: str, sensitive: frozenset[str]
) -> tuple[dict[str, Any] | None, str]:
    """(arguments, arguments_raw) as the audit row keeps them.

    A JSON object is kept decoded, with sensitive values masked. Anything else
    is kept as the raw text, or masked whole when the tool has sensitive
    parameters, since there is no telling the secret part from the rest.
    """
    if isinstance(decoded, dict):
        return mask_arguments(decoded, sensitive), ""
    return None, MASK if sensitive else text


def arguments_for_audit(
    name: str, text: str, registry: ToolRegistry | None = None
) -> tuple[dict[str, Any] | None, str]:
    """audit_form of a call's arguments as the model sent them (a JSON string)."""
    spec = (registry or default_registry).get(name)
    try:
        decoded: Any = json.loads(text) if text.strip() else {}
    except ValueError:
        decoded = None
    return audit_form(decoded, text, spec.sensitive if spec else frozenset())


def masked_tool_calls(
    tool_calls: list[dict[str, Any]] | None, registry: ToolRegistry | None = None
) -> list[dict[str, Any]] | None:
    """An assistant message's `tool_calls` with sensitive argument values masked (for display)."""
    if not tool_calls:
        return tool_calls
    masked = []
    for call in tool_calls:
        function = call.get("function") or {}
        arguments, raw = arguments_for_audit(
            str(function.get("name") or ""), str(function.get("arguments") or ""), registry
        )
        text = json.dumps(arguments, ensure_ascii=False) if arguments is not None else raw
        masked.append({**call, "function": {**function, "arguments": text}})
    return masked
