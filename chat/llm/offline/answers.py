"""How the offline model words its answers: from tool results, or when no tool fits.

Each result becomes one sentence: a calculation as "`2**10` = **1024**.", a
failure in the tool's own words (or "Sorry, that did not work: ..."), else the
result's `message`, else a time in a zone ("It is 09:53 on Wednesday in
Asia/Tokyo") or a time converted between zones, else its plain fields. One or
two sentences make one paragraph; three or more, a short Markdown list. Every
sentence ends with exactly one stop: never "1024.." or ". .". A request to delete that could
only search (the ids were not known yet) ends with how to delete what it found.
"""

from __future__ import annotations

import re
from typing import Any

from chat.llm.offline.history import TurnResult, listed_in
from chat.llm.offline.words import DESTRUCTIVE_VERBS, WORD, destroys

# The longest tool text quoted as it is (a result that is not JSON).
MAX_QUOTED_CHARS = 300
# The demo's own sentences, shown as examples when the offered tools can answer them.
EXAMPLES = [
    (("calculator", "get_current_time"), "what is 2**10 and what time is it in London?"),
    (("record_note",), "note that the boiler was serviced today"),
    (("calculator",), "what is 12*7"),
]
# After a request to delete that could only search, how to delete what was found.
DELETE_HINT = 'Say "Delete them" to delete them.'
_GREETING = re.compile(r"^\s*(?:hi|hello|hey|good (?:morning|afternoon|evening)|howdy)\b", re.I)
_THANKS = re.compile(r"\b(?:thanks|thank you|cheers)\b", re.I)
_ENDS_A_SENTENCE = re.compile(r"[.!?\u2026][\"'\u201d\u2019)*_`]*$")


def answer_compose(results: list[TurnResult], *, asked: str = "") -> str:
    """The answer to the user from this turn's tool results; `asked` is what the user said."""
    sentences = [s for s in (_result_sentence(result) for result in results) if s]
    if _found_for_a_delete(results, asked):
        sentences.append(DELETE_HINT)
    if len(sentences) >= 3:
        return "Here is what I found:\n\n" + "\n".join(f"- {s}" for s in sentences)
    return " ".join(sentences)


def _found_for_a_delete(results: list[TurnResult], asked: str) -> bool:
    """True when a request to delete could only search (one step): the things found are listed."""
    wants = bool({w.lower() for w in WORD.findall(asked)} & DESTRUCTIVE_VERBS)
    deleted = any(destroys(result.name) for result in results)
    found = any(listed_in(result.data) for result in results if not result.failed)
    return wants and found and not deleted


# Asked for code: the one piece the offline model knows, which shows a code block's Copy.
# The model cannot know the address the app is reached at (a request's host is not its
# to read, and a port written here would be wrong on any other): the program reads it
# from TOOLCHAT_URL, which the text says how to fill.
# Asked in a new user's words too: "how do I call toolchat from Python", "the API", "a script".
_CODE = re.compile(
    r"\b(code|snippet|python|sdk|api|script|programmatically|curl)\b",
    re.IGNORECASE,
)
CODE_ANSWER = (
    "Here is how a program talks to me through toolchat's OpenAI-compatible API "
    "(docs/openai-api.md). Set `TOOLCHAT_URL` to this page's address as your browser "
    "shows it (its scheme, host and port, without the path) and `TOOLCHAT_TOKEN` to your "
    "API token (`manage.py drf_create_token USER`), then run:\n\n"
    "```python\n"
    "import os\n\n"
    "from openai import OpenAI\n\n"
    "client = OpenAI(\n"
    '    base_url=os.environ["TOOLCHAT_URL"].rstrip("/") + "/v1",\n'
    '    api_key=os.environ["TOOLCHAT_TOKEN"],\n'
    ")\n"
    "reply = client.chat.completions.create(\n"
    '    model="{model}",\n'
    '    messages=[{{"role": "user", "content": "What is 12*7?"}}],\n'
    ")\n"
    "print(reply.choices[0].message.content)\n"
    "```"
)


def answer_small_talk(
    text: str, tools: list[dict[str, Any]] | None, *, model_id: str = "offline/offline"
) -> str:
    """The answer when no tool fits: what the offline model is, and what to try."""
    names = [t["function"]["name"] for t in tools or [] if t.get("type") == "function"]
    hint = ""
    if names:
        listed = ", ".join(f"`{name}`" for name in names)
        tries = [f"`{ex}`" for needs, ex in EXAMPLES if set(needs) <= set(names)][:2]
        hint = f" I can use these tools: {listed}."
        if tries:
            hint += f" Try {' or '.join(tries)}."
    if not text.strip():
        return "Hello! How can I help?"
    if _GREETING.match(text):
        return f"Hello! I am the offline model: I answer by running my tools.{hint}"
    if _THANKS.search(text):
        return "You are welcome!"
    if _CODE.search(text):
        return CODE_ANSWER.format(model=model_id)
    return f"I am the offline model, so I only understand requests for my tools.{hint}"


def answer_no_earlier_result() -> str:
    """The answer to "multiply that by 3" when nothing earlier gave a number."""
    return (
        "There is no earlier result to work with yet. Ask me something like `what is 2**10` first."
    )


def sentence(text: str) -> str:
    """The text as one tidy sentence: single spaces, a capital, exactly one final stop."""
    text = re.sub(r"\s+", " ", text).strip().replace("...", "\u2026")
    text = re.sub(r"\.(?:\s*\.)+", ".", text)
    if not text:
        return ""
    if text[0].islower():
        text = text[0].upper() + text[1:]
    return text if _ENDS_A_SENTENCE.search(text) else text + "."


def number_shown(value: int | float) -> str:
    """A number as a person writes it (no binary noise, no trailing .0)."""
    return f"{value:.12g}" if isinstance(value, float) else str(value)


def _result_sentence(result: TurnResult) -> str:
    data = result.data
    if isinstance(data, str):
        return sentence(_shortened(data))
    if isinstance(data, list):
        return _list_sentence(data)
    if not isinstance(data, dict):
        return sentence(f"The result is {_shown(data)}")
    if result.failed:
        return _failure_sentence(data)
    return _dict_sentence(data)


def _list_sentence(data: list[Any]) -> str:
    if not data or any(isinstance(item, dict | list) for item in data):
        return sentence(f"The result has {len(data)} items")
    shown = ", ".join(_shown(item) for item in data[:3])
    return sentence(
        f"The result has {len(data)} items: {shown}{' and more' if len(data) > 3 else ''}"
    )


def _failure_sentence(data: dict[str, Any]) -> str:
    message = data.get("message")
    if isinstance(message, str) and message.strip():
        return sentence(_in_code(message, data.get("expression")))
    return sentence(f"Sorry, that did not work: {data.get('error') or 'unknown error'}")


def _dict_sentence(data: dict[str, Any]) -> str:
    """A result that worked: a calculation, its message, its value, a time, or its plain fields."""
    expression, message, value = data.get("expression"), data.get("message"), data.get("result")
    if isinstance(expression, str) and isinstance(value, int | float):
        return sentence(f"`{expression}` = **{number_shown(value)}**")
    if isinstance(message, str) and message.strip():
        return sentence(_in_code(message, expression))
    if "result" in data:
        return sentence(f"The result is {_shown(value)}")
    return _moment_sentence(data) or _fields_sentence(data)


def _fields_sentence(data: dict[str, Any]) -> str:
    fields = [
        f"{key.replace('_', ' ')} {_shown(item)}"
        for key, item in data.items()
        if key != "success" and isinstance(item, str | int | float) and not isinstance(item, bool)
    ][:4]
    if not fields:
        return "Done."
    listed = ", ".join(fields[:-1]) + (" and " if len(fields) > 1 else "") + fields[-1]
    return sentence(f"It came back with {listed}")


def _moment_sentence(data: dict[str, Any]) -> str:
    """A time somewhere ("It is 09:53 on Wednesday in Asia/Tokyo"), or one converted to another zone."""
    source, target = _moment(data.get("source")), _moment(data.get("target"))
    if source and target:
        difference = data.get("time_difference")
        shown = f" ({difference})" if isinstance(difference, str) and difference else ""
        return sentence(f"{source} is {target}{shown}")
    here = _moment(data)
    return sentence(f"It is {here}") if here else ""


def _moment(data: Any) -> str:
    """ "14:00 on Wednesday in Europe/Paris" from {timezone, datetime, day_of_week}; "" if not one."""
    if not isinstance(data, dict):
        return ""
    zone, when, day = data.get("timezone"), data.get("datetime"), data.get("day_of_week")
    clock = re.search(r"T(\d{2}:\d{2})", when) if isinstance(when, str) else None
    if not isinstance(zone, str) or clock is None:
        return ""
    on_day = f" on {day}" if isinstance(day, str) and day else ""
    return f"{clock.group(1)}{on_day} in {zone}"


def _in_code(message: str, expression: Any) -> str:
    """The message with the expression in it as code, so that Markdown leaves 2**10 alone."""
    if isinstance(expression, str) and expression and f"`{expression}`" not in message:
        return message.replace(expression, f"`{expression}`", 1)
    return message


def _shown(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "no", None: "nothing"}[value]
    if isinstance(value, int | float):
        return f"**{number_shown(value)}**"
    return _shortened(str(value))


def _shortened(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) <= MAX_QUOTED_CHARS:
        return text
    return text[:MAX_QUOTED_CHARS].rsplit(" ", 1)[0] + " \u2026"
