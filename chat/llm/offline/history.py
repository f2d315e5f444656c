"""What the offline model reads back from the conversation it is given.

The user's last words; the tool results of the current turn, each with the
name and arguments of the call that asked for it; and the values a follow-up
may point back to: the last number a calculation gave ("multiply that by 3"),
the title of the last note ("search my notes for that"), and the things with
ids that tool results listed ("delete them"), less those a tool has since
deleted.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from chat.images import image_facts
from chat.llm.offline.words import destroys

Message = dict[str, Any]

# A number stated as a result in an assistant's answer: "= 1024", "is **84**".
# A clock time ("It is 14:02") or a date is not a result.
_STATED_RESULT = re.compile(
    r"(?:=|\b(?:is|equals|makes|gives)\b)\s*[*_`]*\s*(-?\d+(?:,\d{3})*(?:\.\d+)?)(?![\d:/,]|\.\d)"
)
TRUNCATION_MARKER = "\n...[truncated"
_MESSAGE_FIELD = re.compile(r'"message":\s*"((?:[^"\\]|\\.)*)"')

Number = int | float


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


def images_seen(messages: Sequence[Message]) -> str:
    """What the user's last message showed, in words ("" for no image).

    "I see 1 image (image/png, 64x64)." An image sent as data is read from its
    header; one sent as an https URL is named by its host (the offline model,
    like toolchat, fetches nothing).
    """
    index = _last_user_index(messages)
    content = messages[index].get("content") if index is not None else None
    if not isinstance(content, list):
        return ""
    said = []
    for part in content:
        url = (part.get("image_url") or {}).get("url") if isinstance(part, dict) else None
        if isinstance(url, str):
            said.append(_image_said(url))
    if not said:
        return ""
    count = "1 image" if len(said) == 1 else f"{len(said)} images"
    return f"I see {count} ({'; '.join(said)})."


def _image_said(url: str) -> str:
    if not url.startswith("data:"):
        return f"at {urlsplit(url).hostname or 'a URL'}, not fetched"
    try:
        facts = image_facts(base64.b64decode(url.partition(",")[2]))
    except (binascii.Error, ValueError):
        facts = None
    return facts.said() if facts is not None else "unreadable"


def turn_results(messages: Sequence[Message]) -> list[TurnResult]:
    """The tool results after the user's last message, in order."""
    start = _last_user_index(messages)
    return _results(messages, 0 if start is None else start + 1, len(messages))


def last_number(messages: Sequence[Message]) -> Number | None:
    """The last number a turn before the user's last message gave, or None.

    A turn's tool results come first (the last numeric `result`), then what the
    assistant said ("... = 1024."); an older turn is read only when the newer
    one gave no number.
    """
    end = _last_user_index(messages)
    if end is None:
        return None
    starts = [i for i, message in enumerate(messages[:end]) if message.get("role") == "user"]
    for start, stop in reversed(list(zip([0, *starts], [*starts, end], strict=True))):
        for result in reversed(_results(messages, start, stop)):
            value = result.data.get("result") if isinstance(result.data, dict) else None
            if not result.failed and _is_number(value):
                return value
        for message in reversed(messages[start:stop]):
            if message.get("role") == "assistant":
                stated = _STATED_RESULT.findall(message_text(message))
                if stated:
                    return _number(stated[-1].replace(",", ""))
    return None


def last_note_title(messages: Sequence[Message]) -> str | None:
    """The title of the last note a tool recorded before the user's last message, or None."""
    end = _last_user_index(messages)
    for result in reversed(_results(messages, 0, end or 0)):
        data = result.data.get("data") if isinstance(result.data, dict) else None
        if not result.failed and isinstance(data, dict) and isinstance(data.get("title"), str):
            return data["title"]  # type: ignore[no-any-return]
    return None


@dataclass(frozen=True)
class Listed:
    """A thing a tool result listed with its id, and its words (title, body, ...)."""

    id: str
    words: str


def id_listings(messages: Sequence[Message]) -> list[list[Listed]]:
    """The lists of things with ids that tool results gave, oldest first.

    Every result counts, this turn's too. A result of a tool that destroys
    lists nothing, and the ids it names are left out of the others: a deleted
    note is no longer there to act on.
    """
    results = [r for r in _results(messages, 0, len(messages)) if not r.failed]
    gone = {item.id for r in results if destroys(r.name) for item in listed_in(r.data)}
    listings = []
    for result in results:
        if destroys(result.name):
            continue
        items = [item for item in listed_in(result.data) if item.id not in gone]
        if items:
            listings.append(items)
    return listings


def listed_in(data: Any, depth: int = 0) -> list[Listed]:
    """The things with an `id` anywhere in a result (a few levels deep)."""
    if depth > 3:
        return []
    if isinstance(data, list):
        return [item for value in data for item in listed_in(value, depth + 1)]
    if not isinstance(data, dict):
        return []
    identifier = data.get("id")
    if isinstance(identifier, str | int) and not isinstance(identifier, bool):
        words = " ".join(str(v) for k, v in data.items() if k != "id" and isinstance(v, str))
        return [Listed(str(identifier), words)]
    return [item for value in data.values() for item in listed_in(value, depth + 1)]


def _last_user_index(messages: Sequence[Message]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return None


class _Call(NamedTuple):
    """A tool call the model made: the tool's name and the arguments it was given."""

    name: str
    arguments: dict[str, Any]


def _results(messages: Sequence[Message], start: int, stop: int) -> list[TurnResult]:
    calls: dict[str, _Call] = {}
    results: list[TurnResult] = []
    for message in messages[:stop]:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except ValueError:
                arguments = {}
            calls[str(call.get("id"))] = _Call(
                str(function.get("name") or ""),
                arguments if isinstance(arguments, dict) else {},
            )
    for message in messages[start:stop]:
        if message.get("role") == "tool":
            made = calls.get(str(message.get("tool_call_id")), _Call("", {}))
            results.append(TurnResult(made.name, made.arguments, _parsed(message_text(message))))
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


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(text: str) -> Number:
    value = float(text)
    return int(value) if value.is_integer() and "." not in text else value
