"""A response's input items: kept as the request gave them, listed as OpenAI's list endpoints page.

`GET /v1/responses/{id}/input_items` answers the items of the request (not its
`instructions`), each with an `id` (the client's, or `in_<run>_<n>_<index>`),
a message's text content as parts. It pages as OpenAI's lists do: `order`
(`desc`, the default, newest first; or `asc`), `after` (an item id),
`limit` (1 to 100, 20 by default), and answers `{"object": "list", "data",
"first_id", "last_id", "has_more"}`.
"""

from __future__ import annotations

from typing import Any

from chat.exceptions import InvalidInput
from chat.models import Run
from chat.openai_api.response_output import response_parts

INPUT_ITEMS = "input_items"
DEFAULT_LIMIT, MAX_LIMIT = 20, 100


def input_items_read(raw: Any, run: Run, part: int) -> list[dict[str, Any]]:
    """The request's `input` as items, each with an id (checked before: a string or items)."""
    if isinstance(raw, str):
        raw = [{"type": "message", "role": "user", "content": raw}]
    items = []
    for index, item in enumerate(raw if isinstance(raw, list) else []):
        shown = dict(item)
        shown.setdefault("id", f"in_{run.pk.hex}_{part}_{index}")
        if "role" in shown:
            shown.setdefault("type", "message")
            if isinstance(shown.get("content"), str):
                kind = "output_text" if shown["role"] == "assistant" else "input_text"
                shown["content"] = [{"type": kind, "text": shown["content"]}]
        items.append(shown)
    return items


def input_items_of(run: Run, part: int) -> list[dict[str, Any]]:
    """The items a stored response was given, oldest first."""
    stored = response_parts(run)[part - 1] if part else (run.response or {})
    return list(stored.get(INPUT_ITEMS) or [])


def input_items_page(
    items: list[dict[str, Any]], query: Any, *, of: str = "this response"
) -> dict[str, Any]:
    """One page of the items, as OpenAI's list endpoints answer; InvalidInput names a bad query."""
    order = query.get("order") or "desc"
    if order not in ("asc", "desc"):
        raise InvalidInput('order must be "asc" or "desc".', field="order")
    try:
        limit = int(query.get("limit") or DEFAULT_LIMIT)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be an integer from 1 to {MAX_LIMIT}.", field="limit")
    ordered = items if order == "asc" else items[::-1]
    after = query.get("after")
    if after:
        ids = [item["id"] for item in ordered]
        if after not in ids:
            raise InvalidInput(f"after: no item {after[:80]!r} in {of}.", field="after")
        ordered = ordered[ids.index(after) + 1 :]
    data = ordered[:limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(ordered) > limit,
    }
