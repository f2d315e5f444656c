"""The rows a model's history is built from: a conversation's newest, read as tuples.

`model_history` is the one read of a history for a model call, within the
turn's budgets (`TOOLCHAT_HISTORY_MAX_MESSAGES`, `TOOLCHAT_HISTORY_MAX_CHARS`):
a run reads it once (chat/engine/request.py `history_load`), and what the
tests and the benchmarks read as the history a model is sent
(chat/selectors.py `history_for_model`) is the same read. The statements are constant SQL,
written once, on SQLite as on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection

from chat.history import HistoryRow, RunHistory
from chat.images import IMAGE_KIND, image_url_of
from chat.models import Conversation, Message, Role
from tools.models import Resource

# What message_to_openai reads; the other columns stay in the database.
HISTORY_COLUMNS = ("position", "role", "content", "tool_calls", "tool_call_id", "images")
# Where a bounded history load looks first for the end of the leading system rows.
HEAD_POSITIONS = 16


class HistoryRead(NamedTuple):
    """A history's rows, and whether they are all the conversation's current rows."""

    rows: list[HistoryRow]
    whole: bool  # False: rows before the first user message read were left out
    # With rows left out, the fewest messages they would add to a history cut
    # anywhere before its first user message: those read of them that are not
    # tool messages (repair drops only those) nor leading system rows (kept).
    edge: int = 0


def history_rows(*, conversation: Conversation) -> list[HistoryRow]:
    """Every current row of a conversation, in order, as `build_model_history` takes them.

    Read as HistoryRow tuples, not model instances: a long history is hundreds
    of rows. A model's history within budgets reads only the rows trimming
    could keep (`history_kept`).
    """
    return history_read(conversation=conversation, window=None).rows


def history_read(
    *, conversation: Conversation, window: int | None, last_position: int | None = None
) -> HistoryRead:
    """The conversation's current rows, or its newest `window` from a turn's start.

    Only the newest rows that trimming could keep are read, plus the leading
    system rows: the load stays flat however long the conversation grows.
    `last_position`, when the caller read it (a claimed run has it), lets a
    conversation shorter than the window be read with the plain query (its
    positions count every row ever stored, so the current ones are fewer),
    and bounds the search for the window's edge.

    The rows begin where a user message begins a turn, after the leading
    system rows: trimming cuts only there. `whole` says whether they are
    every current row, and `edge` how many messages at least the rows before
    them would add: a caller that trims them can tell whether an older cut
    could have fit (`history_kept`).
    """
    short = last_position is not None and window is not None and last_position < window
    if window is not None and not short:
        # One statement of two parts, each a range of the (conversation, position)
        # index: the newest `window` rows (from the position of the window-th
        # newest, NULL when there are fewer, and then every row, to the last),
        # and the system rows that lead the conversation, before its first turn
        # (`_HISTORY_WINDOW`).
        rows = _history_read(
            _HISTORY_WINDOW_NEAR if last_position is not None else _HISTORY_WINDOW,
            conversation,
            near=last_position,
            reach=2 * window,
            edge=window - 1,
            head=HEAD_POSITIONS,
        )
        newest = [HistoryRow(*row[:-1]) for row in rows if row[-1] == 1]
        if len(newest) < window:
            # Fewer rows than the window: that is the whole conversation.
            return HistoryRead(newest, whole=True)
        turn = next((i for i, row in enumerate(newest) if row.role == Role.USER), None)
        if turn is not None:
            # Trimming cuts only where a user message begins a turn, so the
            # rows before the window's first one would be cut anyway; the
            # leading system rows, before any user or assistant row, it keeps.
            cut = newest[turn].position
            leading = [HistoryRow(*row[:-1]) for row in rows if row[-1] == 0 and row[0] < cut]
            led = {row.position for row in leading}
            edge = sum(
                1 for row in newest[:turn] if row.role != Role.TOOL and row.position not in led
            )
            return HistoryRead(leading + newest[turn:], whole=False, edge=edge)
        # else: one turn longer than the window; read it all (below).
    return HistoryRead(
        [HistoryRow(*row) for row in _history_read(_HISTORY_ALL, conversation)], True
    )


def history_kept(
    *,
    conversation: Conversation,
    system_prompt: str,
    max_messages: int,
    max_chars: int | None = None,
    last_position: int | None = None,
) -> RunHistory:
    """The history a run keeps: what trimming every current row to the budgets would give.

    It reads the newest rows for the message budget and a quarter more, from
    a turn's start (`history_read`). Each older cut makes the history longer:
    when trimming what was read cuts some of it, or the messages the rows
    before it would add at least (`edge`) could not fit beside it, no older
    cut would fit either, and the history is what trimming the whole
    conversation gives. Otherwise (repair may have dropped stray tool answers
    among the rows read, or the window's edge fell in a long turn) it reads
    twice the budget, then every row, until one of those holds.
    """
    windows = (max(max_messages + max_messages // 4, 20), max(2 * max_messages, 20), None)
    for window in windows:
        read = history_read(conversation=conversation, window=window, last_position=last_position)
        history = RunHistory(read.rows, system_prompt=system_prompt)
        whole, kept = history.sizes(max_messages=max_messages, max_chars=max_chars)
        if read.whole or kept < whole or kept + read.edge > max_messages:
            break
    return history


def model_history(
    *, conversation: Conversation, system_prompt: str, last_position: int | None = None
) -> RunHistory:
    """The history a conversation's model calls are sent, within the turn's budgets.

    Read with as few rows as give what trimming the whole conversation gives
    (`history_kept`): for a long conversation, the budget and a quarter.
    """
    return history_kept(
        conversation=conversation,
        system_prompt=system_prompt,
        max_messages=settings.TOOLCHAT_HISTORY_MAX_MESSAGES,
        max_chars=settings.TOOLCHAT_HISTORY_MAX_CHARS,
        last_position=last_position,
    )


def history_messages(history: RunHistory) -> list[dict[str, Any]]:
    """The history as a model call sends it: trimmed to the turn's budgets (a new list)."""
    return history.messages(
        max_messages=settings.TOOLCHAT_HISTORY_MAX_MESSAGES,
        max_chars=settings.TOOLCHAT_HISTORY_MAX_CHARS,
    )


# The history's reads are constant statements: Django took longer to build the
# windowed one than the database took to answer it, and ran a converter for
# every row of every column. (Built from constants alone: S608 below.)
_COLUMNS = ", ".join(HISTORY_COLUMNS)
_CURRENT = "conversation_id = %(conversation)s AND superseded_at IS NULL"
# The conversation's last position, superseded rows too (as the claim reads it):
# without a filter, PostgreSQL finds it at the index's end whatever its statistics.
_LAST = (
    "(SELECT position FROM chat_message WHERE conversation_id = %(conversation)s"
    " ORDER BY position DESC LIMIT 1)"
)
_HISTORY_ALL = f"SELECT {_COLUMNS} FROM chat_message WHERE {_CURRENT} ORDER BY position"  # noqa: S608

# PostgreSQL must read only the rows it returns, whatever it believes of the
# conversation's length (its statistics know few conversations, and a long one
# grew since; a new database has none, and then it sorts a conversation's rows
# to find one end): every part is a range bounded at both ends (an OR of the two
# parts, or one bound, let it read the whole conversation and filter it), and
# each edge is looked for among the positions from `reach` before `near` (the
# last position, superseded rows too, that a claimed run read or `_LAST`
# reads), or the first `head`, before the whole conversation is searched (a
# search it may make by sorting every row): only when rows were superseded in
# bulk, or many system rows lead. The newest rows end at `_LAST`. The leading
# system rows are those before the first user or assistant row: a tool row
# before it answers no call, and repair drops it.
_HISTORY_WINDOW = f"""
SELECT {_COLUMNS}, 1 AS part FROM chat_message
WHERE {_CURRENT} AND position BETWEEN COALESCE(
    (SELECT position FROM chat_message WHERE {_CURRENT} AND position >= {{near}} - %(reach)s
     ORDER BY position DESC LIMIT 1 OFFSET %(edge)s),
    (SELECT position FROM chat_message WHERE {_CURRENT}
     ORDER BY position DESC LIMIT 1 OFFSET %(edge)s),
    0) AND {_LAST}
UNION ALL
SELECT {_COLUMNS}, 0 AS part FROM chat_message
WHERE {_CURRENT} AND role = 'system' AND position BETWEEN 0 AND COALESCE(
    (SELECT position FROM chat_message WHERE {_CURRENT} AND role IN ('user', 'assistant')
     AND position < %(head)s ORDER BY position LIMIT 1),
    (SELECT position FROM chat_message WHERE {_CURRENT} AND role IN ('user', 'assistant')
     ORDER BY position LIMIT 1),
    0) - 1
ORDER BY position
"""  # noqa: S608
_HISTORY_WINDOW_NEAR = _HISTORY_WINDOW.format(near="%(near)s")
_HISTORY_WINDOW = _HISTORY_WINDOW.format(near=_LAST)


def _history_read(sql: str, conversation: Conversation, **params: Any) -> list[tuple[Any, ...]]:
    """A history statement's rows, their tool calls decoded as the model's field does.

    A user message's images come as the URLs a model is sent (`HistoryRow.image_urls`),
    their bytes read from their resources in one more query, only when there are some.
    """
    pk: Any = Message._meta.pk
    params["conversation"] = pk.get_db_prep_value(conversation.pk, connection)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    calls = HISTORY_COLUMNS.index("tool_calls")
    images = HISTORY_COLUMNS.index("images")
    field: Any = Message._meta.get_field("tool_calls")
    rows = [
        (*row[:calls], field.from_db_value(row[calls], None, connection), *row[calls + 1 :])
        if row[calls] is not None
        else row
        for row in rows
    ]
    if not any(row[images] is not None for row in rows):
        return rows
    decoded = {i: field.from_db_value(row[images], None, connection) for i, row in enumerate(rows)}
    _older_images_leave(decoded)
    data = _images_data(entry for entries in decoded.values() if entries for entry in entries)
    return [
        (*row[:images], _image_urls(decoded[i], data), *row[images + 1 :]) if decoded[i] else row
        for i, row in enumerate(rows)
    ]


def _older_images_leave(decoded: dict[int, Any]) -> None:
    """Mark all but the newest `TOOLCHAT_HISTORY_MAX_IMAGES` images as left out.

    A model call then carries (and a worker reads the bytes of) a bounded
    number of images however many the conversation gathered; the older ones
    are said in words (chat/images.py `image_parts`), and kept in the record.
    """
    room = settings.TOOLCHAT_HISTORY_MAX_IMAGES
    for index in sorted(decoded, reverse=True):
        entries = decoded[index] or []
        for position in range(len(entries) - 1, -1, -1):
            if room > 0:
                room -= 1
            else:
                entries[position] = {**entries[position], "left_out": True}


def _images_data(entries: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The stored data of the images these entries name (those whose bytes toolchat holds)."""
    ids = {
        entry["resource_id"]
        for entry in entries
        if not entry.get("url") and not entry.get("left_out")
    }
    if not ids:
        return {}
    found = Resource.objects.filter(pk__in=ids, kind=IMAGE_KIND).values_list("pk", "data")
    return {str(pk): data for pk, data in found}


def _image_urls(
    entries: list[dict[str, Any]], data: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    return [
        {
            "url": image_url_of(entry, data.get(str(entry.get("resource_id")))),
            "detail": entry.get("detail"),
            **({"left_out": True} if entry.get("left_out") else {}),
        }
        for entry in entries
    ]
