"""What the offline model reads back from the conversation it is given.

The user's last words, and the tool results of the current turn, each with the
name and arguments of the call that asked for it.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]

TRUNCATION_MARKER = "\n...[truncated"
_MESSAGE_FIELD = re.compile(r'"message":\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class TurnResult:
    """One tool result, with the call it answers (name and arguments; empty when unknown)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    data: Any = None

    @property
    def failed(self) -> bool:
        """True when the tool reported a failure, or only an error."""
        data = self.data
        return isinstance(data, dict) and (
            data.get("success") is False or ("error" in data and "message" not in data)
        )


def message_text(message: Message) -> str:
    """The text of a message, whether its content is a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def last_user_text(messages: Sequence[Message]) -> str:
    """What the user said last ("" when they said nothing)."""
    index = _last_user_index(messages)
    return message_text(messages[index]) if index is not None else ""


def turn_results(messages: Sequence[Message]) -> list[TurnResult]:
    """The tool results after the user's last message, in order."""
    start = _last_user_index(messages)
    return _results(messages, 0 if start is None else start + 1, len(messages))


def _last_user_index(messages: Sequence[Message]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return None


def _results(messages: Sequence[Message], start: int, stop: int) -> list[TurnResult]:
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    results: list[TurnResult] = []
    for message in messages[:stop]:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except ValueError:
                arguments = {}
            calls[str(call.get("id"))] = (
                str(function.get("name") or ""),
                arguments if isinstance(arguments, dict) else {},
            )
    for message in messages[start:stop]:
        if message.get("role") == "tool":
            name, arguments = calls.get(str(message.get("tool_call_id")), ("", {}))
            results.append(TurnResult(name, arguments, _parsed(message_text(message))))
    return results


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    text = text.split(TRUNCATION_MARKER, 1)[0].strip()
    if not text.startswith(("{", "[")):
        return text
    # JSON cut to fit the model's budget: its message, if the cut left it whole.
    match = _MESSAGE_FIELD.search(text)
    with contextlib.suppress(ValueError):
        if match:
            return {"message": json.loads(f'"{match.group(1)}"')}
    return {"message": "The result was too long to read in full"}
