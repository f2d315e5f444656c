"""How the offline model chooses the tool a request asks for.

It scores each offered tool by the user's words against the tool's name,
parameter names and description (stemmed, without stop words); an arithmetic
expression in the request counts strongly for a tool with an `expression`
parameter. The best-scoring tool whose required arguments the words give is
chosen (the first offered wins a tie); if none, the best match, whose call
then says what is missing. A tool that asks for one call per city ("in London
and Paris") gets one call for each.

A tool named for destroying (delete, remove, ...) is only ever chosen when the
words ask for that, and then it is the only kind chosen: with the ids it needs
from the conversation it is called; without them, the tool that finds the same
things (`search_notes` for `delete_notes`) is called with the words that say
which, so that a loop's next step, or the user's "delete them", deletes what
it found.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chat.llm.base import ToolCall
from chat.llm.offline.arguments import Tool, fill, topic_words
from chat.llm.offline.history import Listed
from chat.llm.offline.kinds import is_zone_param
from chat.llm.offline.reading import Reading, reading_of, stem
from chat.llm.offline.words import (
    DESTRUCTIVE_VERBS,
    QUERY_PARAMS,
    city_zones,
)

# Name words of a tool that finds things ("search_notes" finds what "delete_notes" deletes).
FINDER_VERBS = frozenset({"search", "find", "list", "lookup", "query"})
# "Confident": enough for a part of a message to count as a request of its own.
CONFIDENT_SCORE = 3.0


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
    reading = reading_of(text, expression, note_title, known)
    candidates = _candidates(tools)
    scored = [(score, tool) for tool in candidates if (score := _score(tool, reading)) >= 2]
    # The best-matching tool whose required arguments the words give (first offered
    # wins a tie); if none, the best match, whose call then says what is missing.
    # Arguments are filled best first, and only until one is complete.
    scored.sort(key=lambda pair: -pair[0])
    if reading.destroy and any(tool.destructive for _, tool in scored):
        return _destructive_pick(scored, candidates, reading)
    chosen: tuple[float, Tool, dict[str, Any]] | None = None
    for score, tool in scored:
        arguments = fill(tool, reading)
        if set(tool.required) <= set(arguments):
            return _pick(score, tool, arguments, reading)
        chosen = chosen or (score, tool, arguments)
    return _pick(*chosen, reading) if chosen else None


def _candidates(tools: list[dict[str, Any]]) -> list[Tool]:
    return [
        Tool(
            name=t["function"]["name"],
            description=t["function"].get("description") or "",
            parameters=t["function"].get("parameters") or {},
        )
        for t in tools
        if t.get("type") == "function"
    ]


def _score(tool: Tool, reading: Reading) -> float:
    """How strongly the words ask for the tool; a tool that destroys scores only when asked to."""
    if tool.destructive and not reading.destroy:
        return 0.0
    name_words = set(tool.name_words)
    name_stems = {stem(w) for w in name_words}
    # "remove" asks for delete_notes as well as "delete" does.
    score = 3.0 if tool.destructive else 0.0
    score += 1.5 if reading.opening in name_stems else 0.0
    score += 3 * len(reading.exact & name_words)  # the exact word of the tool's name
    score += 2 * len(reading.stems & name_stems)
    score += 1.5 * len(reading.stems & {stem(p) for p in tool.param_names})
    score += 0.5 * len(reading.stems & tool.vocabulary())
    if reading.expression and "expression" in tool.param_names:
        score += 6
    return score


def _pick(score: float, tool: Tool, arguments: dict[str, Any], reading: Reading) -> Pick:
    calls = [arguments]
    zone_params = [p for p, schema in tool.properties.items() if is_zone_param(p, schema)]
    if len(zone_params) == 1:
        # "in London and Paris" asks for two times: one call for each city.
        zones = city_zones(reading.text)
        if len(zones) > 1:
            calls = [{**arguments, zone_params[0]: zone} for zone in zones]
    return Pick(tool.name, score, calls, complete=set(tool.required) <= set(arguments))


def _destructive_pick(
    scored: list[tuple[float, Tool]], candidates: list[Tool], reading: Reading
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
    topic = topic_words(reading, tool)
    finder = _finder(tool, candidates) if topic else None
    if finder is None:
        return _pick(score, tool, fill(tool, reading), reading)
    query = next((p for p in finder.param_names if p.lower() in QUERY_PARAMS), None)
    return _pick(score, finder, {query: " ".join(topic)} if query else {}, reading)


def _finder(destructive: Tool, tools: list[Tool]) -> Tool | None:
    """The offered tool that finds what `destructive` deletes: a search named for the same things."""
    things = set(destructive.name_words) - DESTRUCTIVE_VERBS
    for tool in tools:
        words = set(tool.name_words)
        if not tool.destructive and words & FINDER_VERBS and words & things:
            return tool
    return None


def call_make(name: str, arguments: dict[str, Any]) -> ToolCall:
    """A tool call with a fresh id, as a model would send it."""
    return ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", name=name, arguments=json.dumps(arguments))
