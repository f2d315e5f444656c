"""The code a request names a string parameter by: "order 1234", "ticket #55", "order A-7".

A client's own tool often takes an identifier (`order`, `ticket_id`, `sku`):
when the words name the parameter and a code follows (a word with a digit in
it, after "number", "no.", "id" or a colon if any), that code is the value,
not the rest of the sentence. The code's digits are then no number of their
own (chat/llm/offline/arguments.py `NUMBER` reads around them).
"""

from __future__ import annotations

import re

# A word with a digit in it, an optional # first: 1234, A-1, #55, XK_9b.
_CODE = r"#?[A-Za-z]*[-_]?\d[\w-]*"
_LEAD = r"(?:\s+(?:number|no\.?|id|code))?\s*[:=]?\s*"


def named_code(name: str, text: str) -> str | None:
    """The code after the words of the parameter's name in `text`, or None."""
    words = [word for word in re.split(r"[_\W]+", name.lower()) if word and word != "id"]
    if not words:
        return None
    named = r"\s+".join(re.escape(word) for word in words)
    found = re.search(rf"\b{named}s?\b{_LEAD}({_CODE})(?![\w-])", text, re.IGNORECASE)
    if found is None:
        return None
    return found.group(1)
