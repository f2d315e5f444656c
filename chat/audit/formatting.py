"""How the staff pages (the /audit/ pages and the admin) show stored JSON and tool calls.

Both show the same values; they differ only in markup (a template in one, format_html
in the other), so the text is made here once and each escapes it its own way.
"""

from __future__ import annotations

import json
from typing import Any

from chat.models import Message
from tools.audit import masked_tool_calls

# How much of the user's message that began a run a row of runs shows (cut by the database).
QUESTION_CHARS = 160


def pretty_json(value: Any) -> str:
    """A JSON value indented for reading, unescaped; "" for None (nothing stored)."""
    if value is None:
        return ""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def shown_tool_calls(message: Message) -> list[dict[str, Any]]:
    """An assistant message's tool calls as staff see them: sensitive argument values masked."""
    # The history codec only stores objects here; skipping anything else keeps a page
    # about a hand-edited row readable rather than a 500.
    calls = [call for call in message.tool_calls or [] if isinstance(call, dict)]
    return masked_tool_calls(calls) or []
