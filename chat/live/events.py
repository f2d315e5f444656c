"""Run events: stored first, numbered per conversation, sent to live clients after commit.

`event_publish` is the one place that publishes. The database row is the
truth: the channel layer may drop a message (a slow socket, a reconnect), so a
client that resumes with the last `seq` it saw reads the rest from RunEvent.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection, transaction

from chat.models import Run, RunEvent

logger = logging.getLogger(__name__)

EVENT_TYPES = frozenset(
    {
        "run.started",
        "message.created",
        "message.delta",
        "tool_call.started",
        "tool_call.approval_requested",
        "tool.progress",
        "tool.event",
        "tool_call.completed",
        "tools.ended",
        "message.completed",
        "run.completed",
        "run.failed",
        "run.cancelled",
    }
)


def conversation_group(conversation_id: Any) -> str:
    """The channel-layer group that carries one conversation's live events."""
    return f"conversation.{conversation_id}"


def event_envelope(event: RunEvent) -> dict[str, Any]:
    """The event as clients see it (WebSocket, SSE and the events endpoint alike)."""
    return {
        "seq": event.seq,
        "type": event.type,
        "run_id": str(event.run_id),
        "ts": event.created_at.isoformat().replace("+00:00", "Z"),
        "data": event.data,
    }


def _next_seq(conversation_id: Any) -> int:
    # One statement bumps and reads the counter under the row lock, so concurrent
    # publishers (parallel tools on several workers) never share a number.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE chat_conversation SET last_event_seq = last_event_seq + 1 "
            "WHERE id = %s RETURNING last_event_seq",
            [conversation_id.hex if connection.vendor == "sqlite" else conversation_id],
        )
        row = cursor.fetchone()
    if row is None:
        raise Run.DoesNotExist(f"conversation {conversation_id} is gone")
    return int(row[0])


def event_publish(*, run: Run, type: str, data: dict[str, Any] | None = None) -> RunEvent:
    """Store the event with the conversation's next seq; send it to live clients on commit."""
    if type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {type!r}")
    with transaction.atomic():
        seq = _next_seq(run.conversation_id)
        event = RunEvent.objects.create(
            conversation_id=run.conversation_id, run=run, seq=seq, type=type, data=data or {}
        )
        transaction.on_commit(lambda: _send(event))
    return event


def _send(event: RunEvent) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(
            conversation_group(event.conversation_id),
            {"type": "run.event", "event": event_envelope(event)},
        )
    except Exception:
        # The event is stored; a client that missed it gets it on resume.
        logger.exception("could not send event %s #%s to the channel layer", event.type, event.seq)
