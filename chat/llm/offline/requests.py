"""How the offline model reads the user's message as requests, and plans one step's calls.

A message may hold several requests ("what is 2**10 and what time is it in
London"): it is cut where a new request opens (a question word, a verb that
asks for something, a tool's name word, or an arithmetic expression) after
" and ", a comma, ";", "?", "!", a full stop, "also" or "then". The cut stands
only if every part picks a tool confidently on its own; a part that picks none
goes back to the part before it, so "note that the boiler and the valve were
serviced" stays one note. Each part becomes a call, all in one step.

A follow-up may point back: "multiply that by 3", "add 5 to the last result",
"what is that squared" use the last number the conversation gave (or, later in
the same message, the expression of an earlier part).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chat.llm.base import ToolCall
from chat.llm.offline.choosing import Pick, call_make, tool_pick
from chat.llm.offline.history import (
    Listed,
    Message,
    Number,
    id_listings,
    last_note_title,
    last_number,
    last_user_text,
)
from chat.llm.offline.reading import expression_find
from chat.llm.offline.words import OPENERS, TITLE_PARAMS, WORD

# Where one request may end and the next begin (only where the next one opens).
SEPARATOR = re.compile(
    r"\s*(?:[;?!]+|\.(?=\s))\s*(?:(?:and\s+)?(?:also|then)\b)?\s*"
    r"|,?\s+(?:and\s+)?(?:also|then)\s+|,\s*(?:and\s+)?|\s+and\s+",
    re.I,
)
# A request cut short ("and 3") may open with an expression of its own.
_OPENS_WITH_ARITHMETIC = re.compile(r"^[-(]*\d")

_REF = r"(?:that|it|this|the (?:last |previous )?(?:result|answer|number|value|one))"
_N = r"(?P<n>-?\d+(?:\.\d+)?)"
# A follow-up's arithmetic on the earlier result, as (pattern, expression) with {r} and {n}.
FOLLOW_UPS = [
    (rf"\bmultiply (?:{_REF} )?by {_N}", "{r}*{n}"),
    (rf"\bdivide (?:{_REF} )?by {_N}", "{r}/{n}"),
    (rf"\badd {_N} to {_REF}", "{r}+{n}"),
    (rf"\b(?:subtract|take away|take) {_N} from {_REF}", "{r}-{n}"),
    (rf"\braise {_REF} to (?:the power of |the )?{_N}", "{r}**{n}"),
    (rf"\b{_REF} ?(?:times|multiplied by|x|\*) ?{_N}", "{r}*{n}"),
    (rf"\b{_REF} ?(?:divided by|over|/) ?{_N}", "{r}/{n}"),
    (rf"\b{_REF} ?(?:plus|\+) ?{_N}", "{r}+{n}"),
    # A minus sign needs spaces: "note that -5 degrees" is no subtraction.
    (rf"\b{_REF} (?:minus|-) {_N}", "{r}-{n}"),
    (rf"\b{_REF} ?(?:to the power of|\*\*|\^) ?{_N}", "{r}**{n}"),
    (rf"\b{_REF} (?:squared|to the square)\b", "{r}**2"),
    (rf"\b{_REF} cubed\b", "{r}**3"),
    (rf"\bsquare root of {_REF}", "{r}**0.5"),
    (rf"\bsquare {_REF}", "{r}**2"),
    (rf"\bcube {_REF}", "{r}**3"),
    (rf"\bdouble {_REF}", "{r}*2"),
    (rf"\btriple {_REF}", "{r}*3"),
    (rf"\b(?:halve {_REF}|half of {_REF})", "{r}/2"),
    (rf"{_N} ?(?:%|percent) of {_REF}", "{r}*{n}/100"),
    (rf"^(?:and |now |then )?(?:times|multiplied by) {_N}", "{r}*{n}"),
    (rf"^(?:and |now |then )?plus {_N}", "{r}+{n}"),
    (rf"^(?:and |now |then )?minus {_N}", "{r}-{n}"),
    (rf"^(?:and |now |then )?divided by {_N}", "{r}/{n}"),
]
_FOLLOW_UPS = [(re.compile(pattern, re.I), template) for pattern, template in FOLLOW_UPS]


@dataclass(frozen=True)
class _Part:
    start: int
    end: int
    pick: Pick | None


def calls_plan(messages: Sequence[Message], tools: list[dict[str, Any]]) -> list[ToolCall]:
    """The tool calls the user's last message asks for, all for one step; [] if none fits."""
    text = last_user_text(messages)
    earlier = last_number(messages)
    title = last_note_title(messages)
    known = id_listings(messages)
    parts = _parts(text, tools, earlier, title, known)
    if len(parts) < 2 or not all(p.pick and p.pick.confident for p in parts):
        expression = follow_up_expression(text, earlier) if earlier is not None else None
        whole = tool_pick(text, tools, expression=expression, note_title=title, known=known)
        parts = [_Part(0, len(text), whole)] if whole else []
    return [
        call_make(p.pick.name, arguments) for p in parts if p.pick for arguments in p.pick.calls
    ]


def refers_back(text: str) -> bool:
    """True when the words do arithmetic on an earlier result ("multiply that by 3")."""
    return follow_up_expression(text, 1) is not None


def follow_up_expression(text: str, earlier: Number | str) -> str | None:
    """The expression a follow-up asks for on an earlier result; None if it asks none."""
    shown = _operand(earlier)
    lowered = text.lower().strip()
    for pattern, template in _FOLLOW_UPS:
        match = pattern.search(lowered)
        if match:
            number = match.groupdict().get("n") or ""
            return template.format(r=shown, n=f"({number})" if number.startswith("-") else number)
    return None


def _parts(
    text: str,
    tools: list[dict[str, Any]],
    earlier: Number | None,
    title: str | None,
    known: list[list[Listed]],
) -> list[_Part]:
    """The message cut into requests, each with its pick; parts that pick nothing rejoined."""
    # A body after a colon or a line break belongs to its request: no cut there.
    head = re.split(r":\s|\n", text, maxsplit=1)[0]
    cuts = [(0, 0)]
    for match in SEPARATOR.finditer(head):
        if _opens_request(text[match.end() :], tools):
            cuts.append((match.start(), match.end()))
    spans = [
        (start, cuts[i + 1][0] if i + 1 < len(cuts) else len(text))
        for i, (_, start) in enumerate(cuts)
    ]
    parts: list[_Part] = []
    pending = None  # the start of leading words that picked nothing ("Hi! What is 2+2?")
    for start, end in spans:
        if pending is not None:
            start, pending = pending, None
        part = _part(text, start, end, tools, earlier, title, known, parts)
        if part.pick and part.pick.confident:
            parts.append(part)
        elif parts:
            parts[-1] = _part(text, parts[-1].start, end, tools, earlier, title, known, parts[:-1])
        else:
            pending = start
    return parts


def _part(
    text: str,
    start: int,
    end: int,
    tools: list[dict[str, Any]],
    earlier: Number | None,
    title: str | None,
    known: list[list[Listed]],
    before: list[_Part],
) -> _Part:
    words = text[start:end]
    # "that", later in the same message, is what an earlier part calculates.
    previous = next(
        (
            call["expression"]
            for part in reversed(before)
            if part.pick
            for call in part.pick.calls
            if isinstance(call.get("expression"), str)
        ),
        None,
    )
    reference: Number | str | None = f"({previous})" if previous else earlier
    expression = follow_up_expression(words, reference) if reference is not None else None
    expression = expression or expression_find(words)
    pick = tool_pick(words, tools, expression=expression, note_title=title, known=known)
    if pick and before:
        _references_resolve(pick, text[before[-1].start : before[-1].end], previous)
    return _Part(start, end, pick)


# A title that only points back ("note it down", "save that"): what it points at.
_BARE_REFERENCE = re.compile(r"(?:that|it|this)(?:\s+(?:down|up))?|down|up", re.I)


def _references_resolve(pick: Pick, earlier: str, expression: str | None) -> None:
    """Give a title that only points back ("note it down") what the part before asked.

    "What is 12*7? Then note it down" notes "12*7", not "it down": the
    expression that part calculates, or else its words ("What time is it in
    Tokyo").
    """
    subject = expression or earlier.strip().rstrip("?.!,;:").strip()
    subject = re.sub(r"^(?:(?:and|then|also)\s+)+", "", subject, flags=re.I)
    for call in pick.calls:
        for name, value in call.items():
            pointing_back = isinstance(value, str) and _BARE_REFERENCE.fullmatch(
                value.strip().rstrip(".!")
            )
            if name in TITLE_PARAMS and pointing_back and subject:
                call[name] = subject


def _opens_request(text: str, tools: list[dict[str, Any]]) -> bool:
    words = WORD.findall(text[:40].lower())
    if not words:
        return False
    if _OPENS_WITH_ARITHMETIC.match(text.strip()) and expression_find(text):
        return True
    name_words = {
        word for tool in tools for word in re.split(r"[_\-\s]+", tool["function"]["name"].lower())
    }
    return words[0] in OPENERS or words[0] in name_words


def _operand(value: Number | str) -> str:
    if isinstance(value, str):
        return value
    shown = f"{value:.12g}" if isinstance(value, float) else str(value)
    return f"({shown})" if shown.startswith("-") else shown
