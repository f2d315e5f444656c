"""How the offline model picks a tool for one request and fills its arguments.

It scores each offered tool by the user's words against the tool's name,
parameter names and description (stemmed, without stop words); an arithmetic
expression in the request counts strongly for a tool with an `expression`
parameter. The arguments come from the request by the schema:

- `expression`: the arithmetic in the text ("12 times 7" is `12*7`);
- numbers, an enum value named in the text, quoted strings;
- a title and a body (`title`, `body`, ...): the user's words as written, after
  the words that asked for the tool ("note that"), without Markdown emphasis or
  code marks; what follows a colon or a line break is the body;
- a time zone: the IANA name of a city the text names, one call per city;
- a query: the words that are left, or the last note's title for "that";
- any other string: the words that are left.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chat.llm.base import ToolCall
from chat.llm.offline_history import Listed
from chat.llm.offline_words import (
    ARTICLES,
    BODY_PARAMS,
    CONNECTORS,
    DESTRUCTIVE_VERBS,
    FILLERS,
    PLURAL_REFERENCE,
    POLITE,
    QUERY_PARAMS,
    REFERENCE,
    REQUEST_VERBS,
    STOPWORDS,
    TIMEZONE_PARAMS,
    TITLE_PARAMS,
    WORD,
    city_zones,
    destroys,
    zone_mentions,
)

QUOTED = re.compile(r"\"([^\"]+)\"|'([^']+)'|“([^”]+)”")
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
# An arithmetic expression: numbers joined by at least one operator.
EXPRESSION = re.compile(r"[-(\s]*\d[\d.\s]*(?:(?:\*\*|[-+*/%^x\u00d7\u00f7])[\s(]*-?[\d.]+[\s)]*)+")
_NUM = r"-?\d+(?:\.\d+)?"
# Arithmetic said in words, between numbers: "12 times 7", "1024 squared".
SPOKEN_OPERATORS = [
    (re.compile(rf"({_NUM})\s+(?:times|multiplied by)\s+(?=-?\d)", re.I), r"\1*"),
    (re.compile(rf"({_NUM})\s+(?:divided by|over)\s+(?=-?\d)", re.I), r"\1/"),
    (re.compile(rf"({_NUM})\s+plus\s+(?=-?\d)", re.I), r"\1+"),
    (re.compile(rf"({_NUM})\s+minus\s+(?=-?\d)", re.I), r"\1-"),
    (re.compile(rf"({_NUM})\s+(?:to the power of|raised to)\s+(?=-?\d)", re.I), r"\1**"),
    (re.compile(rf"({_NUM})\s+(?:mod|modulo)\s+(?=-?\d)", re.I), r"\1%"),
    (re.compile(rf"({_NUM})\s+squared\b", re.I), r"\1**2"),
    (re.compile(rf"({_NUM})\s+cubed\b", re.I), r"\1**3"),
    (re.compile(rf"\bsquare root of\s+({_NUM})", re.I), r"\1**0.5"),
]
# Parameter name words for a time zone, and for the zone a conversion starts from or goes to.
ZONE_WORDS = frozenset({"timezone", "tz", "zone"})
SOURCE_WORDS = frozenset({"source", "from", "origin"})
TARGET_WORDS = frozenset({"target", "to", "into", "destination", "dest"})
# Name words of a tool that finds things ("search_notes" finds what "delete_notes" deletes).
FINDER_VERBS = frozenset({"search", "find", "list", "lookup", "query"})
# "Confident": enough for a part of a message to count as a request of its own.
CONFIDENT_SCORE = 3.0


def _stem(word: str) -> str:
    word = word.lower().strip("'")
    for suffix in ("ing", "es", "ed", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


_STOP_STEMS = frozenset(_stem(word) for word in STOPWORDS)


@dataclass(frozen=True)
class _Tool:
    name: str
    description: str
    parameters: dict[str, Any]

    @property
    def name_words(self) -> list[str]:
        return [w.lower() for w in re.split(r"[_\-\s]+", self.name) if w]

    @property
    def param_names(self) -> list[str]:
        properties = self.parameters.get("properties")
        return list(properties) if isinstance(properties, dict) else []

    @property
    def properties(self) -> dict[str, dict[str, Any]]:
        """The parameters' schemas; an MCP server's may be anything JSON Schema allows
        (`"x": true`), and only the parts this model can use are read."""
        found = self.parameters.get("properties")
        items = found.items() if isinstance(found, dict) else ()
        return {name: schema for name, schema in items if isinstance(schema, dict)}

    @property
    def destructive(self) -> bool:
        """A tool named for deleting or removing: called only when the words ask for that."""
        return destroys(self.name)

    @property
    def required(self) -> list[str]:
        required = self.parameters.get("required")
        return [r for r in required if isinstance(r, str)] if isinstance(required, list) else []

    def vocabulary(self) -> set[str]:
        words = set(self.name_words) | {p.lower() for p in self.param_names}
        words |= {w.lower() for w in WORD.findall(self.description)}
        return {_stem(w) for w in words} - _STOP_STEMS


@dataclass(frozen=True)
class Pick:
    """The tool a request asks for, how strongly, and the arguments of its calls."""

    name: str
    score: float
    calls: list[dict[str, Any]]
    complete: bool  # every required parameter has a value

    @property
    def confident(self) -> bool:
        """Sure enough to stand as a request of its own within a longer message."""
        return self.complete and self.score >= CONFIDENT_SCORE


def tool_pick(
    text: str,
    tools: list[dict[str, Any]],
    *,
    expression: str | None = None,
    note_title: str | None = None,
    known: Sequence[Sequence[Listed]] = (),
) -> Pick | None:
    """The offered tool the words ask for, with its arguments; None if none fits.

    `expression` is arithmetic the caller already read from the words (a
    follow-up such as "multiply that by 3"); `note_title` is what "that" means
    to a query; `known` are the things with ids the conversation listed, oldest
    list first.
    """
    reading = _read(text, expression, note_title, known)
    candidates = _candidates(tools)
    scored = [(score, tool) for tool in candidates if (score := _score(tool, reading)) >= 2]
    # The best-matching tool whose required arguments the words give (first offered
    # wins a tie); if none, the best match, whose call then says what is missing.
    # Arguments are filled best first, and only until one is complete.
    scored.sort(key=lambda pair: -pair[0])
    if reading.destroy and any(tool.destructive for _, tool in scored):
        return _destructive_pick(scored, candidates, reading)
    chosen: tuple[float, _Tool, dict[str, Any]] | None = None
    for score, tool in scored:
        arguments = fill(tool, reading)
        if set(tool.required) <= set(arguments):
            return _pick(score, tool, arguments, reading)
        chosen = chosen or (score, tool, arguments)
    return _pick(*chosen, reading) if chosen else None


@dataclass(frozen=True)
class Reading:
    """What a request says, read once for every tool it is matched against."""

    text: str
    words: list[str]
    expression: str | None
    note_title: str | None
    known: Sequence[Sequence[Listed]]

    @property
    def exact(self) -> set[str]:
        return {w.lower() for w in self.words}

    @property
    def stems(self) -> set[str]:
        return {_stem(w) for w in self.words} - _STOP_STEMS

    @property
    def opening(self) -> str:
        """The stem of the verb a request opens with: it names its tool."""
        return next((_stem(w) for w in self.words if w.lower() not in POLITE), "")

    @property
    def destroy(self) -> bool:
        """True when the words ask for something to be deleted or removed."""
        return bool(self.exact & DESTRUCTIVE_VERBS)


def _read(
    text: str, expression: str | None, note_title: str | None, known: Sequence[Sequence[Listed]]
) -> Reading:
    text = plain_text(text)
    return Reading(
        text=text,
        words=list(WORD.findall(text)),
        expression=expression or expression_find(text),
        note_title=note_title,
        known=known,
    )


def _candidates(tools: list[dict[str, Any]]) -> list[_Tool]:
    return [
        _Tool(
            name=t["function"]["name"],
            description=t["function"].get("description") or "",
            parameters=t["function"].get("parameters") or {},
        )
        for t in tools
        if t.get("type") == "function"
    ]


def _score(tool: _Tool, reading: Reading) -> float:
    """How strongly the words ask for the tool; a tool that destroys scores only when asked to."""
    if tool.destructive and not reading.destroy:
        return 0.0
    name_words = set(tool.name_words)
    name_stems = {_stem(w) for w in name_words}
    # "remove" asks for delete_notes as well as "delete" does.
    score = 3.0 if tool.destructive else 0.0
    score += 1.5 if reading.opening in name_stems else 0.0
    score += 3 * len(reading.exact & name_words)  # the exact word of the tool's name
    score += 2 * len(reading.stems & name_stems)
    score += 1.5 * len(reading.stems & {_stem(p) for p in tool.param_names})
    score += 0.5 * len(reading.stems & tool.vocabulary())
    if reading.expression and "expression" in tool.param_names:
        score += 6
    return score


def _pick(score: float, tool: _Tool, arguments: dict[str, Any], reading: Reading) -> Pick:
    calls = [arguments]
    zone_params = [p for p, schema in tool.properties.items() if is_zone_param(p, schema)]
    if len(zone_params) == 1:
        # "in London and Paris" asks for two times: one call for each city.
        zones = city_zones(reading.text)
        if len(zones) > 1:
            calls = [{**arguments, zone_params[0]: zone} for zone in zones]
    return Pick(tool.name, score, calls, complete=set(tool.required) <= set(arguments))


def _destructive_pick(
    scored: list[tuple[float, _Tool]], candidates: list[_Tool], reading: Reading
) -> Pick:
    """Delete what the words name, by the ids the conversation gave; else search for it first.

    Only a tool that destroys answers a request to delete. Without the ids it
    needs, the tool that finds the same things (`search_notes` for
    `delete_notes`) is called with the words that say which: in a loop, the
    next step deletes what it found; in one step, "delete them" does. With
    neither ids nor words that say which, the call says what is missing:
    nothing is searched for everything and then deleted.
    """
    destructive = [(score, tool) for score, tool in scored if tool.destructive]
    for score, tool in destructive:
        arguments = fill(tool, reading)
        if set(tool.required) <= set(arguments):
            return _pick(score, tool, arguments, reading)
    score, tool = destructive[0]
    topic = _topic(reading, tool)
    finder = _finder(tool, candidates) if topic else None
    if finder is None:
        return _pick(score, tool, fill(tool, reading), reading)
    query = next((p for p in finder.param_names if p.lower() in QUERY_PARAMS), None)
    return _pick(score, finder, {query: " ".join(topic)} if query else {}, reading)


def _finder(destructive: _Tool, tools: list[_Tool]) -> _Tool | None:
    """The offered tool that finds what `destructive` deletes: a search named for the same things."""
    things = set(destructive.name_words) - DESTRUCTIVE_VERBS
    for tool in tools:
        words = set(tool.name_words)
        if not tool.destructive and words & FINDER_VERBS and words & things:
            return tool
    return None


def _topic(reading: Reading, tool: _Tool) -> list[str]:
    """The words that say which things a request means ("kettle" in "delete my notes about the kettle")."""
    named = set(tool.name_words)
    named_stems = {_stem(w) for w in named}
    return [
        w
        for w in reading.words
        if (lower := w.lower()) not in STOPWORDS | FILLERS | DESTRUCTIVE_VERBS | PLURAL_REFERENCE
        and lower not in named
        and f"{lower}s" not in named
        and _stem(lower) not in named_stems
    ]


def call_make(name: str, arguments: dict[str, Any]) -> ToolCall:
    """A tool call with a fresh id, as a model would send it."""
    return ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", name=name, arguments=json.dumps(arguments))


def plain_text(text: str) -> str:
    """The text without Markdown emphasis and code marks (`**the boiler**` is the boiler)."""
    text = re.sub(r"`([^`\n]*)`", r"\1", text)
    # Only marks that open and close around words: 2**10 is arithmetic, not emphasis.
    text = re.sub(r"(?<![\w*])(\*\*|__)(?=\S)(.+?)(?<=\S)\1(?![\w*])", r"\2", text)
    return re.sub(r"(?<![\w*])([*_])(?=[^\s*_])(.+?)(?<=[^\s*_])\1(?![\w*])", r"\2", text)


def expression_find(text: str) -> str | None:
    """The arithmetic expression in the text (numbers and operators, or said in words)."""
    for pattern, replacement in SPOKEN_OPERATORS:
        text = pattern.sub(replacement, text)
    found = [m.group(0).strip() for m in EXPRESSION.finditer(text)]
    found = [f for f in found if re.search(r"\d\s*(\*\*|[-+*/%^x\u00d7\u00f7])\s*[\d(-]", f)]
    if not found:
        return None
    expression = max(found, key=len)
    return (
        expression.replace("\u00d7", "*")
        .replace("\u00f7", "/")
        .replace("^", "**")
        .replace("x", "*")
    )


# --- filling arguments from the schema ----------------------------------------------

_SKIP = object()  # a rule that does not apply to the parameter


@dataclass
class _Filling:
    """What one request offers the parameters of one tool; numbers and quotes are used once."""

    tool: _Tool
    reading: Reading
    numbers: list[str]
    quoted: list[str]
    rest: str
    title: str
    body: str
    arguments: dict[str, Any]
    used_rest: bool = False

    @property
    def text(self) -> str:
        return self.reading.text


def fill(tool: _Tool, reading: Reading) -> dict[str, Any]:
    """The tool's arguments from the request, parameter by parameter, by the first rule that applies.

    Required parameters come first: the remaining text goes where it is needed most.
    """
    text = reading.text
    title, body = _title_and_body(text, tool)
    filling = _Filling(
        tool=tool,
        reading=reading,
        numbers=[] if reading.expression else NUMBER.findall(text),
        quoted=[next(g for g in m.groups() if g) for m in QUOTED.finditer(text)],
        rest=_remaining_text(text, tool),
        title=title,
        body=body,
        arguments={},
    )
    required = set(tool.required)
    for name in sorted(tool.properties, key=lambda p: p not in required):
        schema = tool.properties[name]
        for rule in RULES:
            value = rule(name, schema, filling)
            if value is not _SKIP:
                if value is not None:
                    filling.arguments[name] = value
                break
    return filling.arguments


def _expression_rule(name: str, schema: dict[str, Any], filling: _Filling) -> Any:
    return (
        filling.reading.expression if name == "expression" and filling.reading.expression else _SKIP
    )


def _number_rule(name: str, schema: dict[str, Any], filling: _Filling) -> Any:
    kind = schema.get("type")
    if kind not in {"integer", "number"} or not filling.numbers:
        return _SKIP
    value = filling.numbers.pop(0)
    return int(float(value)) if kind == "integer" else float(value)


def _ids_rule(name: str, schema: dict[str, Any], filling: _Filling) -> Any:
    """Ids the conversation gave: those of the things the words name, else the last list's."""
    if not is_id_param(name, schema):
        return _SKIP
    ids = known_ids(filling.reading.known, _topic(filling.reading, filling.tool))
    if not ids:
        return None
    return ids if schema.get("type") == "array" else ids[0]


def _not_text_rule(name: str, schema: dict[str, Any], filling: _Filling) -> Any:
    return None if schema.get("type") != "string" else _SKIP


def _enum_rule(name: str, schema: dict[str, Any], filling: _Filling) -> Any:
    values = schema.get("enum")
    if not values:
        return _SKIP
    lowered = filling.text.lower()
    return next((v for v in values if str(v).lower() in lowered), None)


def _zone_rule(name: str, schema: dict[str, Any], filling: _Filling) -> Any:
    mentions = zone_mentions(filling.text)
    if not is_zone_param(name, schema) or not mentions:
        return _SKIP
    return zone_for(name, filling.text, mentions)


def _clock_rule(name: str, schema: dict[str, Any], filling: _Filling) -> Any:
    if not is_clock_param(name, schema):
        return _SKIP
    return clock_time(filling.text, seconds=_wants_seconds(schema))


def _title_rule(name: str, schema: dict[str, Any], filling: _Filling) -> Any:
    if name.lower() not in TITLE_PARAMS or not filling.title:
        return _SKIP
    # A title-only tool keeps the details in its title rather than lose them.
    has_body = any(p.lower() in BODY_PARAMS for p in filling.tool.properties)
    return filling.title if has_body or not filling.body else f"{filling.title}: {filling.body}"


def _body_rule(name: str, schema: dict[str, Any], filling: _Filling) -> Any:
    if name.lower() not in BODY_PARAMS:
        return _SKIP
    if any(p.lower() in TITLE_PARAMS for p in filling.tool.properties):
        return filling.body or None
    if filling.title or filling.body:
        return f"{filling.title}\n{filling.body}".strip()
    return _SKIP


def _quoted_rule(name: str, schema: dict[str, Any], filling: _Filling) -> Any:
    return filling.quoted.pop(0) if filling.quoted else _SKIP


def _query_rule(name: str, schema: dict[str, Any], filling: _Filling) -> Any:
    if name.lower() not in QUERY_PARAMS or filling.rest or name not in filling.tool.required:
        return _SKIP
    # "search my notes for that": the note just made; "list my notes": all of them.
    note_title = filling.reading.note_title
    return note_title if note_title and REFERENCE.search(filling.text) else ""


def _rest_rule(name: str, schema: dict[str, Any], filling: _Filling) -> Any:
    needed = name in filling.tool.required or not filling.arguments
    if not filling.rest or filling.used_rest or not needed:
        return _SKIP
    filling.used_rest = True
    return filling.rest


# In order: the first rule that applies to a parameter decides it (None leaves it out).
RULES = [
    _expression_rule,
    _number_rule,
    _ids_rule,
    _not_text_rule,
    _enum_rule,
    _zone_rule,
    _clock_rule,
    _title_rule,
    _body_rule,
    _quoted_rule,
    _query_rule,
    _rest_rule,
]


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


def _wants_seconds(schema: dict[str, Any]) -> bool:
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


def _remaining_text(text: str, tool: _Tool) -> str:
    """The user's words without the leading ones that only asked for the tool."""
    vocabulary = tool.vocabulary()
    words = text.strip().rstrip("?.!").split()
    while words:
        word = re.sub(r"[^\w']", "", words[0]).lower()
        if word in STOPWORDS or word in FILLERS or _stem(word) in vocabulary or not word:
            words.pop(0)
            continue
        break
    return " ".join(words).strip(" ,:;")


def _title_and_body(text: str, tool: _Tool) -> tuple[str, str]:
    """A note's title as the user wrote it (after "note that"), and its body.

    The body is what follows the first colon or line break: "note boiler: -
    filter - valve" is the title "boiler" with the body "- filter - valve".
    """
    head, body = _split_at_colon(text)
    title = _after_request(head, tool)
    if not title and body:
        title, body = _split_at_colon(body)
    return title.strip().rstrip("?.!,;:").strip(), body.strip()


def _split_at_colon(text: str) -> tuple[str, str]:
    # A colon inside a clock time (14:30) does not start a body.
    parts = re.split(r":(?:\s+|$)|\n", text.strip(), maxsplit=1)
    return parts[0].strip(), parts[1].strip() if len(parts) > 1 else ""


def _after_request(text: str, tool: _Tool) -> str:
    verbs = REQUEST_VERBS | set(tool.name_words)
    verb_stems = {_stem(v) for v in verbs}
    words = text.split()

    def bare(index: int) -> str:
        return re.sub(r"[^\w']", "", words[index]).lower() if index < len(words) else ""

    index, asked = 0, False
    while index < len(words):
        word = bare(index)
        if not word or (not asked and word in POLITE):
            index += 1
        elif word in verbs or _stem(word) in verb_stems:
            asked, index = True, index + 1
        elif asked and word in ARTICLES and _stem(bare(index + 1)) in verb_stems:
            index += 1  # "make a note"
        elif asked and word in ARTICLES and bare(index + 1) == "new":
            index += 2  # "take a new note"
        elif asked and word == "to" and bare(index + 1) == "self":
            index += 2  # "note to self"
        elif asked and word in CONNECTORS:
            index += 1
            break
        else:
            break
    return " ".join(words[index:]) if asked else text
