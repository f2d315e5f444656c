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
from dataclasses import dataclass
from typing import Any

from chat.llm.base import ToolCall
from chat.llm.offline_words import (
    ARTICLES,
    BODY_PARAMS,
    CONNECTORS,
    FILLERS,
    POLITE,
    QUERY_PARAMS,
    REFERENCE,
    REQUEST_VERBS,
    STOPWORDS,
    TIMEZONE_PARAMS,
    TITLE_PARAMS,
    WORD,
    city_zones,
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
) -> Pick | None:
    """The offered tool the words ask for, with its arguments; None if none fits.

    `expression` is arithmetic the caller already read from the words (a
    follow-up such as "multiply that by 3"); `note_title` is what "that" means
    to a query.
    """
    candidates = [
        _Tool(
            name=t["function"]["name"],
            description=t["function"].get("description") or "",
            parameters=t["function"].get("parameters") or {},
        )
        for t in tools
        if t.get("type") == "function"
    ]
    text = plain_text(text)
    words = list(WORD.findall(text))
    exact = {w.lower() for w in words}
    stems = {_stem(w) for w in words} - _STOP_STEMS
    expression = expression or expression_find(text)
    # The verb a request opens with names its tool: "note that the time changed" is a note.
    opening = next((_stem(w) for w in words if w.lower() not in POLITE), "")
    scored: list[tuple[float, _Tool]] = []
    for tool in candidates:
        score = 0.0
        name_words = set(tool.name_words)
        if opening in {_stem(w) for w in name_words}:
            score += 1.5
        score += 3 * len(exact & name_words)  # the exact word of the tool's name
        score += 2 * len(stems & {_stem(w) for w in name_words})
        score += 1.5 * len(stems & {_stem(p) for p in tool.param_names})
        score += 0.5 * len(stems & tool.vocabulary())
        if expression and "expression" in tool.param_names:
            score += 6
        if score >= 2:
            scored.append((score, tool))
    # The best-matching tool whose required arguments the words give (first offered
    # wins a tie); if none, the best match, whose call then says what is missing.
    # Arguments are filled best first, and only until one is complete.
    scored.sort(key=lambda pair: -pair[0])
    chosen: tuple[float, _Tool, dict[str, Any]] | None = None
    for score, tool in scored:
        arguments = _fill(tool, text, expression, note_title)
        if set(tool.required) <= set(arguments):
            chosen = (score, tool, arguments)
            break
        chosen = chosen or (score, tool, arguments)
    if chosen is None:
        return None
    score, tool, arguments = chosen
    required = set(tool.required)
    calls = [arguments]
    zone_param = next((p for p in tool.param_names if p.lower() in TIMEZONE_PARAMS), None)
    if zone_param:
        # "in London and Paris" asks for two times: one call for each city.
        zones = city_zones(text)
        if len(zones) > 1:
            calls = [{**arguments, zone_param: zone} for zone in zones]
    return Pick(tool.name, score, calls, complete=required <= set(arguments))


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


def _fill(tool: _Tool, text: str, expression: str | None, note_title: str | None) -> dict[str, Any]:
    # An MCP server's schema may be anything JSON Schema allows (`"x": true`, a list
    # for `required`): only the parts this model can use are read.
    found = tool.parameters.get("properties")
    properties = {
        name: schema
        for name, schema in (found.items() if isinstance(found, dict) else ())
        if isinstance(schema, dict)
    }
    required = set(tool.required)
    quoted = [next(g for g in m.groups() if g) for m in QUOTED.finditer(text)]
    numbers = [] if expression else NUMBER.findall(text)
    rest = _remaining_text(text, tool)
    title, body = _title_and_body(text, tool)
    has_title = any(p.lower() in TITLE_PARAMS for p in properties)
    arguments: dict[str, Any] = {}
    used_rest = False
    # Required parameters first: the remaining text goes where it is needed most.
    order = sorted(properties, key=lambda p: p not in required)
    for name in order:
        schema = properties[name]
        kind = schema.get("type")
        key = name.lower()
        if name == "expression" and expression:
            arguments[name] = expression
        elif kind in {"integer", "number"} and numbers:
            value = numbers.pop(0)
            arguments[name] = int(float(value)) if kind == "integer" else float(value)
        elif kind != "string":
            continue
        elif schema.get("enum"):
            lowered = text.lower()
            match = next((v for v in schema["enum"] if str(v).lower() in lowered), None)
            if match is not None:
                arguments[name] = match
        elif key in TIMEZONE_PARAMS and city_zones(text):
            arguments[name] = city_zones(text)[0]
        elif key in TITLE_PARAMS and title:
            # A title-only tool keeps the details in its title rather than lose them.
            has_body = any(p.lower() in BODY_PARAMS for p in properties)
            arguments[name] = title if has_body or not body else f"{title}: {body}"
        elif key in BODY_PARAMS and has_title:
            if body:
                arguments[name] = body
        elif key in BODY_PARAMS and (title or body):
            arguments[name] = f"{title}\n{body}".strip()
        elif quoted:
            arguments[name] = quoted.pop(0)
        elif key in QUERY_PARAMS and not rest and name in required:
            # "search my notes for that": the note just made; "list my notes": all of them.
            arguments[name] = note_title if note_title and REFERENCE.search(text) else ""
        elif rest and not used_rest and (name in required or not arguments):
            arguments[name] = rest
            used_rest = True
    return arguments


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
