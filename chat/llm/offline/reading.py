"""How the offline model reads a request's words, once for every tool it weighs.

The words are read as the user meant them: without Markdown emphasis or code
marks (`**the boiler**` is the boiler, but 2**10 stays arithmetic); arithmetic
is found whether written (`12*7`, `2^10`) or said ("12 times 7", "1024
squared"); words are compared by a crude stem ("notes" and "note" differ,
"searching" is "search"), stop words left out. A request asks to destroy
something when it says so in a word of its own (delete, remove, erase, ...).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from chat.llm.offline.history import Listed
from chat.llm.offline.words import (
    DESTRUCTIVE_VERBS,
    POLITE,
    STOPWORDS,
    WORD,
)

_NUM = r"-?\d+(?:\.\d+)?"
# An arithmetic expression: numbers joined by at least one operator.
# A point is a decimal point only between digits: "add 2+2." ends with a full stop.
EXPRESSION = re.compile(
    r"[-(\s]*\d(?:\d|\.\d|\s)*(?:(?:\*\*|[-+*/%^x\u00d7\u00f7])[\s(]*-?\d+(?:\.\d+)?[\s)]*)+"
)
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


def stem(word: str) -> str:
    """The word without a plural or verb ending, lower case ("searching" is "search")."""
    word = word.lower().strip("'")
    for suffix in ("ing", "es", "ed", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


STOP_STEMS = frozenset(stem(word) for word in STOPWORDS)


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
        return {stem(w) for w in self.words} - STOP_STEMS

    @property
    def opening(self) -> str:
        """The stem of the verb a request opens with: it names its tool."""
        return next((stem(w) for w in self.words if w.lower() not in POLITE), "")

    @property
    def destroy(self) -> bool:
        """True when the words ask for something to be deleted or removed."""
        return bool(self.exact & DESTRUCTIVE_VERBS)


def reading_of(
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
