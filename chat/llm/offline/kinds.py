"""The kinds of parameter the offline model reads apart: a time zone, a time of day, ids.

For each, whether a parameter is one (by its name, its description, its
format or pattern: an MCP server's schema names them its own way), and the
value the words or the conversation give it. The rules that fill a tool's
arguments (chat/llm/offline/arguments.py) ask these.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from chat.llm.offline.history import Listed
from chat.llm.offline.words import TIMEZONE_PARAMS, WORD

# Parameter name words for a time zone, and for the zone a conversion starts from or goes to.
ZONE_WORDS = frozenset({"timezone", "tz", "zone"})
SOURCE_WORDS = frozenset({"source", "from", "origin"})
TARGET_WORDS = frozenset({"target", "to", "into", "destination", "dest"})


def is_zone_param(name: str, schema: dict[str, Any]) -> bool:
    """A parameter that takes an IANA time zone: named so, or described as one."""
    words = set(re.split(r"[_\-\s]+", name.lower()))
    description = str(schema.get("description") or "").lower()
    return schema.get("type", "string") == "string" and (
        name.lower() in TIMEZONE_PARAMS or bool(words & ZONE_WORDS) or "iana" in description
    )


def zone_for(name: str, text: str, mentions: list[tuple[int, int, str]]) -> str:
    """The zone a parameter gets: after "from" for a source, after "to" for a target, else the first."""
    before = {zone: _word_before(text, start) for start, _, zone in mentions}
    sources = [zone for zone, word in before.items() if word in SOURCE_WORDS]
    targets = [zone for zone, word in before.items() if word in TARGET_WORDS]
    zones = list(before)
    words = set(re.split(r"[_\-\s]+", name.lower()))
    if words & SOURCE_WORDS:
        others = [z for z in zones if z not in targets]
        return (sources or others or zones)[0]
    if words & TARGET_WORDS:
        others = [z for z in zones if z not in sources]
        return (targets or others[1:] or others or zones)[-1]
    return zones[0]


def _word_before(text: str, start: int) -> str:
    words = WORD.findall(text[:start].lower())
    return words[-1] if words else ""


def is_clock_param(name: str, schema: dict[str, Any]) -> bool:
    """A parameter that takes a time of day: named `time`, or described or formatted as HH:MM."""
    if schema.get("type", "string") != "string":
        return False
    hints = f"{schema.get('description') or ''} {schema.get('pattern') or ''}"
    return (
        name.lower() in {"time", "clock_time", "time_of_day"}
        or schema.get("format") == "time"
        or bool(re.search(r"HH:MM|hh:mm|24-hour", hints))
    )


def wants_seconds(schema: dict[str, Any]) -> bool:
    hints = f"{schema.get('description') or ''} {schema.get('pattern') or ''}"
    return schema.get("format") == "time" or "HH:MM:SS" in hints.upper()


_CLOCK = re.compile(
    r"\b(?P<h>[01]?\d|2[0-3])(?::(?P<m>[0-5]\d))?\s*(?P<ap>[ap])\.?m\b\.?"
    r"|\b(?P<h24>[01]?\d|2[0-3]):(?P<m24>[0-5]\d)\b"
    r"|\b(?P<word>noon|midday|midnight)\b",
    re.I,
)


def clock_time(text: str, *, seconds: bool = False) -> str | None:
    """The first time of day the text names, as HH:MM (or HH:MM:SS): "2pm" is 14:00."""
    match = _CLOCK.search(text)
    if match is None:
        return None
    if match.group("word"):
        hour, minute = (0, 0) if match.group("word").lower() == "midnight" else (12, 0)
    elif match.group("h24"):
        hour, minute = int(match.group("h24")), int(match.group("m24"))
    else:
        hour, minute = int(match.group("h")) % 12, int(match.group("m") or 0)
        hour += 12 if match.group("ap").lower() == "p" else 0
    return f"{hour:02d}:{minute:02d}" + (":00" if seconds else "")


def is_id_param(name: str, schema: dict[str, Any]) -> bool:
    """A parameter that takes ids: `id`, `note_id` (a string or a number), `note_ids` (a list)."""
    key = name.lower()
    if schema.get("type") == "array":
        items = schema.get("items")
        kind = items.get("type") if isinstance(items, dict) else None
        return key.endswith("ids") and kind in {None, "string", "integer"}
    return schema.get("type") in {"string", "integer"} and (key == "id" or key.endswith("_id"))


def known_ids(known: Sequence[Sequence[Listed]], topic: list[str]) -> list[str]:
    """The ids of the listed things the topic words name (newest list first), else the last list's."""
    if not known:
        return []
    if not topic:
        return [item.id for item in known[-1]]
    pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, topic)) + r")", re.I)
    found = [
        item.id for listing in reversed(known) for item in listing if pattern.search(item.words)
    ]
    return list(dict.fromkeys(found))
