"""How the offline model picks a tool and fills its arguments from the user's words.

It scores each offered tool by the user's words against the tool's name,
parameter names and description (stemmed, without stop words); an arithmetic
expression in the message counts strongly for a tool with an `expression`
parameter. The arguments come from the message by the schema: the expression,
numbers, an enum value named in the text, quoted strings, and the remaining
words for a string parameter.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from chat.llm.base import ToolCall

WORD = re.compile(r"[A-Za-z0-9_']+")
QUOTED = re.compile(r"\"([^\"]+)\"|'([^']+)'|“([^”]+)”")
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
# An arithmetic expression: numbers joined by at least one operator.
EXPRESSION = re.compile(r"[-(\s]*\d[\d.\s]*(?:(?:\*\*|[-+*/%^x\u00d7\u00f7])[\s(]*-?[\d.]+[\s)]*)+")
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "from",
        "by",
        "with",
        "about",
        "as",
        "into",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "am",
        "do",
        "does",
        "did",
        "what",
        "whats",
        "what's",
        "which",
        "who",
        "whom",
        "how",
        "when",
        "where",
        "why",
        "it",
        "its",
        "it's",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "me",
        "my",
        "mine",
        "i",
        "you",
        "your",
        "we",
        "our",
        "us",
        "please",
        "can",
        "could",
        "would",
        "should",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "let",
        "lets",
        "let's",
        "tell",
        "show",
        "give",
        "get",
        "find",
        "me",
        "now",
        "some",
        "any",
        "all",
        "just",
        "up",
        "out",
        "over",
        "tell",
        "know",
    ]
)
FILLERS = frozenset(
    [
        "that",
        "about",
        "for",
        "my",
        "the",
        "a",
        "an",
        "please",
        "of",
        "on",
        "in",
        "to",
        "me",
        "is",
        "it",
    ]
)


def _stem(word: str) -> str:
    word = word.lower().strip("'")
    for suffix in ("ing", "es", "ed", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


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
        return list((self.parameters.get("properties") or {}).keys())

    def vocabulary(self) -> set[str]:
        words = set(self.name_words) | {p.lower() for p in self.param_names}
        words |= {w.lower() for w in WORD.findall(self.description)}
        return {_stem(w) for w in words} - {_stem(s) for s in STOPWORDS}


def tool_call_pick(text: str, tools: list[dict[str, Any]]) -> ToolCall | None:
    """The offered tool the user's words ask for, with its arguments filled; None if none fits."""
    candidates = [
        _Tool(
            name=t["function"]["name"],
            description=t["function"].get("description") or "",
            parameters=t["function"].get("parameters") or {},
        )
        for t in tools
        if t.get("type") == "function"
    ]
    words = list(WORD.findall(text))
    exact = {w.lower() for w in words}
    stems = {_stem(w) for w in words} - {_stem(s) for s in STOPWORDS}
    expression = _expression(text)
    best: tuple[float, _Tool] | None = None
    for tool in candidates:
        score = 0.0
        name_words = set(tool.name_words)
        score += 3 * len(exact & name_words)  # the exact word of the tool's name
        score += 2 * len(stems & {_stem(w) for w in name_words})
        score += 1.5 * len(stems & {_stem(p) for p in tool.param_names})
        score += 0.5 * len(stems & tool.vocabulary())
        if expression and "expression" in tool.param_names:
            score += 6
        if score > 0 and (best is None or score > best[0]):
            best = (score, tool)
    if best is None or best[0] < 2:
        return None
    tool = best[1]
    arguments = _fill(tool, text, expression)
    return ToolCall(
        id=f"call_{uuid.uuid4().hex[:24]}", name=tool.name, arguments=json.dumps(arguments)
    )


def _expression(text: str) -> str | None:
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


def _fill(tool: _Tool, text: str, expression: str | None) -> dict[str, Any]:
    properties: dict[str, Any] = tool.parameters.get("properties") or {}
    required = set(tool.parameters.get("required") or [])
    quoted = [next(g for g in m.groups() if g) for m in QUOTED.finditer(text)]
    numbers = [] if expression else NUMBER.findall(text)
    rest = _remaining_text(text, tool)
    arguments: dict[str, Any] = {}
    used_rest = False
    # Required parameters first: the remaining text goes where it is needed most.
    order = sorted(properties, key=lambda p: p not in required)
    for name in order:
        schema = properties[name]
        kind = schema.get("type")
        if name == "expression" and expression:
            arguments[name] = expression
        elif kind in {"integer", "number"} and numbers:
            value = numbers.pop(0)
            arguments[name] = int(float(value)) if kind == "integer" else float(value)
        elif kind == "string" and schema.get("enum"):
            lowered = text.lower()
            match = next((v for v in schema["enum"] if str(v).lower() in lowered), None)
            if match is not None:
                arguments[name] = match
        elif kind == "string" and quoted:
            arguments[name] = quoted.pop(0)
        elif kind == "string" and rest and not used_rest and (name in required or not arguments):
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
