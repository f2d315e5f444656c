"""The offline model's follow-up suggestions: what the user might send next.

Asked with the `follow_up_suggestions` response format, it offers two or
three short prompts drawn from the turn that just ended, each one the offline
model itself answers with a tool call: after a calculation, "Multiply that by
3"; after the time somewhere, the time in another city; after a note, a search
for a word of its title; after a search, a note; after small talk, the demo's
own sentences. None repeats a question already asked in the conversation, and
after a tool's answer the demo's sentences only fill up to two, the README's
first question last: it is not offered after every answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from chat.llm.offline.answers import number_shown
from chat.llm.offline.history import Message, TurnResult, turn_results
from chat.llm.offline.words import CITY_ZONES, STOPWORDS, WORD

MAX_SUGGESTIONS = 3
# After a turn that ran tools, the demo's own prompts fill the list up to this many.
AFTER_RESULTS = 2
# The demo's own prompts, with the tools they call: they fill the suggestions up,
# each unless the turn's own suggestions already call all its tools.
DEFAULTS = [
    ("What is 2**10 and what time is it in London?", {"calculator", "get_current_time"}),
    ("Note that the boiler was serviced today", {"record_note"}),
    ("What time is it in Tokyo?", {"get_current_time"}),
]
OTHER_CITIES = ["Tokyo", "New York", "Sydney"]
# A number longer than this reads better as "that" in a suggestion.
MAX_SHOWN_DIGITS = 12


def suggestions_make(messages: Sequence[Message]) -> list[str]:
    """Two or three follow-up prompts for the turn that ends the messages."""
    asked = asked_before(messages)
    found: dict[str, str] = {}  # each suggestion, and the tool it calls
    results = [result for result in turn_results(messages) if not result.failed]
    for result in results:
        found.update(
            (text, tool) for text, tool in _after(result).items() if not _asked(text, asked)
        )
    # After small talk, the demo's sentences in the README's order; after tools, those
    # that call other tools first, and only up to two.
    defaults = list(reversed(DEFAULTS)) if results else DEFAULTS
    wanted = AFTER_RESULTS if results else MAX_SUGGESTIONS
    for text, tools in defaults:
        if len(found) >= wanted:
            break
        if not _asked(text, asked) and not tools <= set(found.values()):
            found.setdefault(text, "")
    return list(found)[:MAX_SUGGESTIONS]


def said(text: str) -> str:
    """A message as it is compared with another: case and spaces aside."""
    return " ".join(text.split()).casefold().rstrip("?.! ")


def _asked(text: str, asked: set[str]) -> bool:
    """Whether a question asked it, alone or before more ("What time is it in Tokyo? Then ...")."""
    suggested = said(text)
    return any(question.startswith(suggested) for question in asked)


def asked_before(messages: Sequence[Message]) -> set[str]:
    """Every user message of the conversation, as `said` compares them."""
    return {
        said(message["content"])
        for message in messages
        if message.get("role") == "user" and isinstance(message.get("content"), str)
    }


def _after(result: TurnResult) -> dict[str, str]:
    data = result.data if isinstance(result.data, dict) else {}
    offered = data.get("suggestions")
    if isinstance(offered, list) and offered:
        # The tool offered its own follow-ups (stored with the answer, shown first).
        return {}
    value = data.get("result")
    if isinstance(value, int | float) and not isinstance(value, bool):
        shown = number_shown(value)
        if value < 0 or len(shown) > MAX_SHOWN_DIGITS:
            return {"Multiply that by 3": "calculator", "What is that squared?": "calculator"}
        return {"Multiply that by 3": "calculator", f"What is {shown} squared?": "calculator"}
    zone = data.get("timezone")
    if isinstance(zone, str):
        city = next(c for c in OTHER_CITIES if CITY_ZONES[c.lower()] != zone)
        return {f"What time is it in {city}?": "get_current_time"}
    note = data.get("data")
    if isinstance(note, dict) and isinstance(note.get("title"), str):
        word = _keyword(note["title"])
        return {f"Search my notes for {word}" if word else "Search my notes": "search_notes"}
    query = data.get("query")
    if isinstance(query, str):
        if query and len(query.split()) <= 2:
            return {f"Note that the {query} was checked today": "record_note"}
        return {"Note that the boiler was serviced today": "record_note"}
    rows = data.get("rows_generated")
    if isinstance(rows, int):
        return {f"Generate a dataset of {200 if rows == 50 else 50} rows": "generate_dataset"}
    return {}


def _keyword(title: str) -> str:
    """The first word of a title that says what it is about ("boiler" in "the boiler ...")."""
    words = [w for w in WORD.findall(title) if w.lower() not in STOPWORDS and len(w) > 2]
    return words[0] if words else ""
