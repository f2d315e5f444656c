"""The offline model's structured answers: a JSON value for a JSON Schema, from the conversation.

A `response_format` of `json_schema` (the openai SDK's `parse`, LangChain's
`with_structured_output`, the Vercel AI SDK's `generateObject`, a Responses
`text.format`) and a call whose arguments must be complete (a forced
`tool_choice`: pydantic-ai's output tool, instructor) are answered with a value
that validates against the schema. Each property of an object takes, in order:

1. the field of the same name in a tool result of this turn (the latest first);
2. for a text named like an answer (`answer`, `summary`, ...): the answer the
   model would have written in words;
3. what the user's words give it, as a tool's arguments are filled
   (arguments.py: numbers, enums, zones, times, titles, quotes);
4. for a number: the last number this turn's results gave (their `result`),
   else the conversation's; for the first text still empty: the answer in words;
5. the simplest value its schema allows: an enum's first value, `const`,
   false, the lower bound, as many items as `minItems` asks, "" padded to
   `minLength`, a date for `format: date`.

`$ref`s (into `$defs` / `definitions`), `anyOf` / `oneOf` (an Optional field:
its first branch that is not null) and `allOf` are followed; a property that
is not required is given only when steps 1 to 4 found it a value. Each value
found is kept only if it validates against its property's schema.
"""

from __future__ import annotations

import datetime
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from chat.llm.offline.arguments import Tool, fill
from chat.llm.offline.history import Message, TurnResult, last_number, last_user_text
from chat.llm.offline.reading import reading_of

# Property names that ask for the answer itself.
ANSWER_NAMES = frozenset(
    {
        "answer",
        "reply",
        "response",
        "text",
        "content",
        "message",
        "summary",
        "output",
        "explanation",
        "final_output",
        "result",
    }
)
MAX_DEPTH = 16  # a recursive schema ($ref to itself) ends here
_FORMATS: dict[str, Callable[[], str]] = {
    "date-time": lambda: datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    "date": lambda: datetime.date.today().isoformat(),
    "time": lambda: datetime.datetime.now(datetime.UTC).strftime("%H:%M:%S"),
    "email": lambda: "user@example.com",
    "uri": lambda: "https://example.com/",
    "uuid": lambda: str(uuid.uuid4()),
}


@dataclass
class Conversation:
    """What a structured answer is filled from."""

    words: str  # the user's last message
    answer: str  # what the model would have written in words
    results: list[TurnResult]
    number: int | float | None  # the last number the conversation gave
    answer_used: bool = False
    root: Mapping[str, Any] = field(default_factory=dict)  # the whole schema ($refs into it)


def conversation_of(
    messages: list[Message], results: list[TurnResult], answer: str
) -> Conversation:
    """What the turn gave: the user's words, its results and answer, its last number."""
    numbers = [
        result.data["result"]
        for result in results
        if isinstance(result.data, dict)
        and isinstance(result.data.get("result"), int | float)
        and not isinstance(result.data["result"], bool)
        and not result.failed
    ]
    return Conversation(
        words=last_user_text(messages),
        answer=answer,
        results=results,
        number=numbers[-1] if numbers else last_number(messages),
    )


def schema_value(
    schema: Mapping[str, Any], conversation: Conversation, *, name: str = "", seed: Any = None
) -> Any:
    """A value for `schema` (a whole schema: its `$ref`s resolve against it), from the conversation.

    `seed` holds arguments already chosen for the top object (a planned call's).
    """
    conversation.root = schema
    return _value(schema, conversation, name, 0, seed)


def _resolved(schema: Any, conversation: Conversation, depth: int = 0) -> Mapping[str, Any]:
    """The schema behind a `$ref`, with `allOf`'s parts merged in; {} for anything unreadable."""
    if not isinstance(schema, Mapping):
        return {}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/") and depth < MAX_DEPTH:
        target: Any = conversation.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, Mapping) else None
        rest = {key: value for key, value in schema.items() if key != "$ref"}
        return {**_resolved(target, conversation, depth + 1), **rest}
    parts = schema.get("allOf")
    if isinstance(parts, list) and parts:
        merged: dict[str, Any] = {key: value for key, value in schema.items() if key != "allOf"}
        for part in parts:
            for key, value in _resolved(part, conversation, depth + 1).items():
                if key == "properties" and isinstance(merged.get(key), Mapping):
                    merged[key] = {**merged[key], **value}
                elif key == "required" and isinstance(merged.get(key), list):
                    merged[key] = [*merged[key], *value]
                else:
                    merged.setdefault(key, value)
        return merged
    return schema


def valid(value: Any, schema: Any, conversation: Conversation) -> bool:
    """Whether `value` validates against `schema` (a part of the whole, whose `$ref`s it keeps)."""
    if not isinstance(schema, Mapping):
        return True
    root = conversation.root
    checked = {**schema, **{key: root[key] for key in ("$defs", "definitions") if key in root}}
    try:
        return bool(validator_for(checked)(checked).is_valid(value))
    except (SchemaError, RecursionError, TypeError, ValueError):
        return False


def _value(schema: Any, conversation: Conversation, name: str, depth: int, seed: Any) -> Any:
    schema = _resolved(schema, conversation)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return seed if seed in schema["enum"] else schema["enum"][0]
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list) and branches:
        return _branch_value(branches, conversation, name, depth, seed)
    kind = _type(schema)
    if seed is not None and kind != "object" and valid(seed, schema, conversation):
        return seed
    if depth > MAX_DEPTH:
        return None if kind == "null" else _empty(kind)
    return _typed(kind, schema, conversation, name, depth, seed)


def _branch_value(
    branches: list[Any], conversation: Conversation, name: str, depth: int, seed: Any
) -> Any:
    """A value of `anyOf` / `oneOf`: the seed where a branch takes it, else the first not null."""
    usable = [b for b in branches if _resolved(b, conversation).get("type") != "null"]
    if seed is not None and any(valid(seed, branch, conversation) for branch in usable):
        return seed
    if not usable:
        return None
    return _value(usable[0], conversation, name, depth + 1, seed)


def _typed(
    kind: str,
    schema: Mapping[str, Any],
    conversation: Conversation,
    name: str,
    depth: int,
    seed: Any,
) -> Any:
    """The value made for a schema of one type."""
    if kind == "object":
        return _object(schema, conversation, depth, seed if isinstance(seed, dict) else {})
    if kind == "array":
        least = schema.get("minItems")
        count = least if isinstance(least, int) else 0
        items = schema.get("items") if isinstance(schema.get("items"), Mapping) else {}
        return [_value(items, conversation, name, depth + 1, None) for _ in range(count)]
    if kind in ("number", "integer"):
        return _number(schema, conversation, kind)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return _text(schema, conversation, name)


def _type(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if isinstance(kind, str):
        return kind
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return "string"


def _empty(kind: str) -> Any:
    return {"object": {}, "array": [], "number": 0, "integer": 0, "boolean": False}.get(kind, "")


def _object(
    schema: Mapping[str, Any], conversation: Conversation, depth: int, seed: dict[str, Any]
) -> dict[str, Any]:
    found = schema.get("properties")
    items = found.items() if isinstance(found, Mapping) else ()
    properties = {key: sub for key, sub in items if isinstance(sub, Mapping)}
    listed = schema.get("required")
    required = [r for r in listed if isinstance(r, str)] if isinstance(listed, list) else []
    reading = reading_of(conversation.words, None, None, ())
    words = fill(Tool("answer", "", {**schema, "properties": properties}), reading)
    built: dict[str, Any] = {}
    # Answer-like texts first: the answer in words goes where it is asked for by name.
    order = sorted(properties, key=lambda p: (p.lower() not in ANSWER_NAMES, p not in required))
    for key in order:
        sub = properties[key]
        value = _found(key, sub, conversation, seed, words)
        if value is _NOTHING and key in required:
            value = _value(sub, conversation, key, depth + 1, None)
        if value is not _NOTHING:
            built[key] = value
    return {key: built[key] for key in properties if key in built}


_NOTHING = object()


def _found(
    key: str,
    schema: Mapping[str, Any],
    conversation: Conversation,
    seed: dict[str, Any],
    words: dict[str, Any],
) -> Any:
    """The value the conversation gives a property (steps 1 to 4), or _NOTHING."""
    candidates = [seed[key]] if key in seed else []
    candidates += [
        result.data[key]
        for result in reversed(conversation.results)
        if isinstance(result.data, dict) and key in result.data
    ]
    resolved = _resolved(schema, conversation)
    kind = _type(resolved)
    if kind == "string" and key.lower() in ANSWER_NAMES and not conversation.answer_used:
        candidates.append(conversation.answer)
    if key in words:
        candidates.append(words[key])
    if kind in ("number", "integer") and conversation.number is not None:
        candidates.append(conversation.number)
    for candidate in candidates:
        if candidate is not None and valid(candidate, schema, conversation):
            if candidate is conversation.answer:
                conversation.answer_used = True
            return candidate
    return _NOTHING  # a required property is then made from its schema


def _number(schema: Mapping[str, Any], conversation: Conversation, kind: str) -> int | float:
    number = conversation.number if conversation.number is not None else 0
    value: int | float = round(number) if kind == "integer" else number
    low, high = schema.get("minimum"), schema.get("maximum")
    if isinstance(schema.get("exclusiveMinimum"), int | float):
        low = schema["exclusiveMinimum"] + (1 if kind == "integer" else 1e-9)
    if isinstance(schema.get("exclusiveMaximum"), int | float):
        high = schema["exclusiveMaximum"] - (1 if kind == "integer" else 1e-9)
    if isinstance(low, int | float) and value < low:
        value = low
    if isinstance(high, int | float) and value > high:
        value = high
    return int(value) if kind == "integer" else value


def _text(schema: Mapping[str, Any], conversation: Conversation, name: str) -> str:
    made = _FORMATS.get(str(schema.get("format") or ""))
    if made is not None:
        return made()
    if conversation.answer and not conversation.answer_used:
        conversation.answer_used = True
        text = conversation.answer
    else:
        text = ""
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(high, int) and len(text) > high:
        text = text[:high]
    if isinstance(low, int) and len(text) < low:
        text = text + "x" * (low - len(text))
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and not _matches(pattern, text):
        return ""
    return text


def _matches(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return True
