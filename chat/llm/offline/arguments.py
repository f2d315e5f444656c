"""How the offline model fills a tool's arguments from the tool's JSON Schema and the request.

Each parameter, required ones first, is decided by the first rule of `RULES`
that applies to it; a rule that applies but finds nothing leaves the
parameter out (the call then says what is missing, rather than guess):

- `expression`: the arithmetic in the text ("12 times 7" is `12*7`);
- a number or an integer: the next number in the text;
- ids (`id`, `note_id`, `note_ids`): those of the things the conversation
  listed that the words name ("the kettle"), else all of the last list's
  ("delete them");
- any other parameter that is not a string is left out;
- an enum: the value the text names as words of its own ("dark mode" for
  `dark_mode`);
- a time zone (named so, or described as an IANA name): the zone of a place
  the text names (a city, a country, or the IANA name written out); a source
  takes the one after "from", a target the one after "to";
- a time of day (`time`, or described as HH:MM): the clock time in the text,
  "2pm" as 14:00;
- a string the words name, followed by a code: the code ("order A-7" is
  `A-7`: chat/llm/offline/codes.py);
- a title and a body (`title`, `body`, ...): the user's words as written, after
  the words that asked for the tool ("note that"), without Markdown emphasis or
  code marks; what follows a colon or a line break is the body;
- a quoted string, in order;
- a query: the words that are left, or the last note's title for "that";
- any other string: the words that are left, once.

An MCP server's schema may be anything JSON Schema allows (`"x": true`, a
list for `required`): only the parts these rules can use are read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from chat.llm.offline.codes import named_code
from chat.llm.offline.kinds import (
    clock_time,
    is_clock_param,
    is_id_param,
    is_zone_param,
    known_ids,
    wants_seconds,
    zone_for,
)
from chat.llm.offline.reading import STOP_STEMS, Reading, stem
from chat.llm.offline.words import (
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
    TITLE_PARAMS,
    WORD,
    destroys,
    zone_mentions,
)

QUOTED = re.compile(r"\"([^\"]+)\"|'([^']+)'|“([^”]+)”")
# A number of its own: not the digits of a code ("A-7", "v2.1") or of a word.
NUMBER = re.compile(r"(?<![\w.-])-?\d+(?:\.\d+)?(?![\w.])")


@dataclass(frozen=True)
class Tool:
    """An offered tool as the offline model reads it: its name's words, its schema's parts."""

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
        return {stem(w) for w in words} - STOP_STEMS


def topic_words(reading: Reading, tool: Tool) -> list[str]:
    """The words that say which things a request means ("kettle" in "delete my notes about the kettle")."""
    named = set(tool.name_words)
    named_stems = {stem(w) for w in named}
    return [
        w
        for w in reading.words
        if (lower := w.lower()) not in STOPWORDS | FILLERS | DESTRUCTIVE_VERBS | PLURAL_REFERENCE
        and lower not in named
        and f"{lower}s" not in named
        and stem(lower) not in named_stems
    ]


_SKIP = object()  # a rule that does not apply to the parameter


@dataclass
class _Filling:
    """What one request offers the parameters of one tool; numbers and quotes are used once."""

    tool: Tool
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


def fill(tool: Tool, reading: Reading) -> dict[str, Any]:
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
        kind = schema.get("type")
        if isinstance(kind, list):  # ["integer", "null"]: read as its first type but null
            schema = {**schema, "type": next((k for k in kind if k != "null"), None)}
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
    ids = known_ids(filling.reading.known, topic_words(filling.reading, filling.tool))
    if not ids:
        return None
    return ids if schema.get("type") == "array" else ids[0]


def _not_text_rule(name: str, schema: dict[str, Any], filling: _Filling) -> Any:
    return None if schema.get("type") != "string" else _SKIP


def _enum_rule(name: str, schema: dict[str, Any], filling: _Filling) -> Any:
    values = schema.get("enum")
    if not values:
        return _SKIP
    return next((v for v in values if _names(filling.text, str(v))), None)


def _names(text: str, value: str) -> bool:
    """True when the text names the value as words of its own ("dark mode" names dark_mode)."""
    words = [re.escape(w) for w in re.split(r"[_\-\s]+", value) if w]
    if not words:
        return False
    return re.search(r"(?<!\w)" + r"[_\-\s]+".join(words) + r"(?!\w)", text, re.I) is not None


def _zone_rule(name: str, schema: dict[str, Any], filling: _Filling) -> Any:
    mentions = zone_mentions(filling.text)
    if not is_zone_param(name, schema) or not mentions:
        return _SKIP
    return zone_for(name, filling.text, mentions)


def _clock_rule(name: str, schema: dict[str, Any], filling: _Filling) -> Any:
    if not is_clock_param(name, schema):
        return _SKIP
    return clock_time(filling.text, seconds=wants_seconds(schema))


def _code_rule(name: str, schema: dict[str, Any], filling: _Filling) -> Any:
    if schema.get("type") not in {"string", None} or "enum" in schema:
        return _SKIP
    code = named_code(name, filling.text)
    return _SKIP if code is None else code


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
    _code_rule,
    _title_rule,
    _body_rule,
    _quoted_rule,
    _query_rule,
    _rest_rule,
]


def _remaining_text(text: str, tool: Tool) -> str:
    """The user's words without the leading ones that only asked for the tool."""
    vocabulary = tool.vocabulary()
    words = text.strip().rstrip("?.!").split()
    while words:
        word = re.sub(r"[^\w']", "", words[0]).lower()
        if word in STOPWORDS or word in FILLERS or stem(word) in vocabulary or not word:
            words.pop(0)
            continue
        break
    return " ".join(words).strip(" ,:;")


def _title_and_body(text: str, tool: Tool) -> tuple[str, str]:
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


def _after_request(text: str, tool: Tool) -> str:
    verbs = REQUEST_VERBS | set(tool.name_words)
    verb_stems = {stem(v) for v in verbs}
    words = text.split()

    def bare(index: int) -> str:
        return re.sub(r"[^\w']", "", words[index]).lower() if index < len(words) else ""

    index, asked = 0, False
    while index < len(words):
        word = bare(index)
        if not word or (not asked and word in POLITE):
            index += 1
        elif word in verbs or stem(word) in verb_stems:
            asked, index = True, index + 1
        elif asked and word in ARTICLES and stem(bare(index + 1)) in verb_stems:
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
