"""record_note, search_notes and delete_notes: the user's notes, Resources of kind "note"."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, StringConstraints

from tools.context import ToolContext
from tools.registry import tool

if TYPE_CHECKING:
    from tools.models import Resource

NOTE = "note"
MAX_RESULTS = 50
# A search lists notes; their full bodies would crowd out the model's context.
PREVIEW_CHARS = 300


@tool(timeout=20, idempotent=False)
def record_note(
    ctx: ToolContext,
    title: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=255)],
    body: Annotated[str, Field(max_length=20_000)] = "",
) -> dict[str, Any]:
    """Record a note for the user: a household event, a reminder, something to remember.

    Args:
        title: A short title, e.g. "Boiler serviced".
        body: Optional details.
    """
    body = body.strip()
    note = ctx.resources.create(NOTE, title=title, data={"title": title, "body": body})
    return {
        "success": True,
        "data": _note(note, preview=False),
        "message": f"Noted: {title}",
        # Offered to the user as a next prompt after the answer.
        "suggestions": [f'Search my notes for "{_keyword(title)}"'],
    }


# Words that say little about what a note is about.
_PLAIN_WORDS = {"that", "this", "with", "from", "have", "been", "were", "will", "today"}


def _keyword(title: str) -> str:
    """The word the user would most likely search the note by: its first telling one."""
    words = re.findall(r"\w+", title)
    telling = [w for w in words if len(w) > 3 and w.lower() not in _PLAIN_WORDS]
    first: str = (telling or words or [title])[0]
    return first[:40]


@tool(timeout=20)
def search_notes(
    ctx: ToolContext,
    query: Annotated[str, Field(max_length=200)],
    limit: Annotated[int, Field(ge=1, le=MAX_RESULTS)] = 10,
) -> dict[str, Any]:
    """Search the user's notes by words in their title or body, most recent first.

    Args:
        query: Text to look for (case-insensitive); an empty string lists all notes.
        limit: How many notes to return at most (1-50).
    """
    query = query.strip()
    found = ctx.resources.search(NOTE, query, limit, data_keys=("body",))
    notes = [_note(note, preview=True) for note in found.items]
    total, returned = found.total, len(notes)
    what = f"matching {query!r}" if query else "in all"
    result: dict[str, Any] = {
        "success": True,
        "data": notes,
        "query": query,
        "total_available": total,
        "returned": returned,
        "truncated": returned < total,
    }
    # A person reading a direct reply wants the notes, not only their number.
    titles = "; ".join(f'"{note.title}"' for note in found.items[:3] if note.title)
    listed = f": {titles}" + (" and more" if returned > 3 else "") if titles else ""
    if total == 0:
        result["message"] = f"No notes {what}." if query else "There are no notes yet."
    elif returned < total:
        result["message"] = (
            f"Found {total} notes {what}; showing the {returned} most recent{listed}."
        )
        result["hint"] = (
            f"Call search_notes again with limit={total} to see them all."
            if total <= MAX_RESULTS
            else f"At most {MAX_RESULTS} notes are returned at once; narrow the query."
        )
    else:
        noun = "note" if total == 1 else "notes"
        result["message"] = f"Found {total} {noun} {what}{listed}."
    return result


def _several(arguments: Any) -> bool:
    """delete_notes asks before deleting more than one note (one at a time it does not)."""
    note_ids = arguments.get("note_ids")
    return not (isinstance(note_ids, list) and len(note_ids) == 1)


def _deleting(arguments: Any) -> str:
    count = len(arguments.get("note_ids") or [])
    return f"Delete {count} note{'s' if count != 1 else ''} for good."


@tool(timeout=20, idempotent=True, requires_approval=_several, describe=_deleting)
def delete_notes(
    ctx: ToolContext,
    note_ids: Annotated[list[str], Field(min_length=1, max_length=MAX_RESULTS)],
) -> dict[str, Any]:
    """Delete some of the user's notes by id (from search_notes); more than one needs approval.

    Args:
        note_ids: The ids of the notes to delete (1-50).
    """
    deleted = ctx.resources.delete(note_ids, kind=NOTE)
    titles = [note.title for note in deleted]
    missing = len(set(note_ids)) - len(deleted)
    message = f"Deleted {len(deleted)} note{'s' if len(deleted) != 1 else ''}"
    message += f": {', '.join(titles)}." if titles else "."
    if missing:
        message += f" {missing} of the ids matched no note of yours."
    return {
        "success": bool(deleted),
        "data": {"deleted": [{"id": str(note.pk), "title": note.title} for note in deleted]},
        "message": message,
    }


def _note(note: Resource, *, preview: bool) -> dict[str, Any]:
    body = str(note.data.get("body", "")) if isinstance(note.data, dict) else ""
    data: dict[str, Any] = {
        "id": str(note.pk),
        "title": note.title,
        "body": body,
        "created_at": note.created_at.isoformat(timespec="seconds"),
    }
    if preview and len(body) > PREVIEW_CHARS:
        data["body"] = body[:PREVIEW_CHARS] + "…"
        data["body_truncated"] = True
    return data
