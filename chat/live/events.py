"""Run events: stored first, numbered per conversation, sent to live clients after commit.

`events_publish` is the one place that publishes. The database row is the
truth: the channel layer may drop a message (a slow socket, a reconnect), so a
client that resumes with the last `seq` it saw reads the rest from RunEvent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from channels.layers import get_channel_layer
from django.db import connection, transaction
from django.utils import timezone

from chat.live.event_types import Event, event_data
from chat.live.layers import ThreadSafeInMemoryChannelLayer
from chat.live.run_ends import WAIT_ENDS, run_end_notify
from chat.live.sender import layer_send
from chat.models import Run, RunEvent

logger = logging.getLogger(__name__)


def conversation_group(conversation_id: Any) -> str:
    """The channel-layer group that carries one conversation's live events."""
    return f"conversation.{conversation_id}"


def run_end_group(run_id: Any) -> str:
    """The channel-layer group told of one run's end only (its terminal event): ?wait=true's."""
    return f"run-end.{run_id}"


def event_envelope(event: RunEvent) -> dict[str, Any]:
    """The event as clients see it (WebSocket, SSE and the events endpoint alike)."""
    return {
        "seq": event.seq,
        "type": event.type,
        "run_id": str(event.run_id),
        "ts": event.created_at.isoformat().replace("+00:00", "Z"),
        "data": event.data,
    }


def _reserve_seqs(conversation_id: Any, count: int) -> int:
    """Take the conversation's next `count` seqs; return the last one.

    One statement bumps and reads the counter under the row lock, so concurrent
    publishers (parallel tools on several workers) never share a number.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE chat_conversation SET last_event_seq = last_event_seq + %s "
            "WHERE id = %s RETURNING last_event_seq",
            [count, conversation_id.hex if connection.vendor == "sqlite" else conversation_id],
        )
        row = cursor.fetchone()
    if row is None:
        raise Run.DoesNotExist(f"conversation {conversation_id} is gone")
    return int(row[0])


def events_publish(*, run: Run, events: Sequence[Event]) -> list[RunEvent]:
    """Store events with the conversation's next seqs, in order; send them to live clients on commit.

    Each is an object of its class (chat/live/event_types.py), stored as its
    type and its data.

        One statement on PostgreSQL, two elsewhere, however many events: inside
        the caller's transaction when there is one, so that a step's rows and its
        events commit together.
    """
    if not events:
        return []
    rows = [(event.TYPE, event_data(event)) for event in events]
    if connection.vendor == "postgresql":
        stored = _insert_numbered(run, rows)
    else:
        with transaction.atomic(savepoint=False):
            last = _reserve_seqs(run.conversation_id, len(rows))
            stored = RunEvent.objects.bulk_create(
                [
                    RunEvent(
                        conversation_id=run.conversation_id,
                        run=run,
                        seq=last - len(rows) + index,
                        type=type,
                        data=data,
                    )
                    for index, (type, data) in enumerate(rows, start=1)
                ]
            )
    transaction.on_commit(lambda: _send(stored))
    return stored


# The counter's bump and the rows' insert in one statement: atomic by itself,
# so a batch of events needs neither a transaction nor a second round trip.
_INSERT_NUMBERED = """
WITH counter AS (
    UPDATE chat_conversation SET last_event_seq = last_event_seq + %(count)s
    WHERE id = %(conversation)s RETURNING last_event_seq
)
INSERT INTO chat_runevent (conversation_id, run_id, seq, type, data, created_at)
SELECT %(conversation)s, %(run)s, counter.last_event_seq - %(count)s + batch.n,
       batch.type, batch.data::jsonb, %(now)s
FROM counter, unnest(%(types)s::text[], %(datas)s::text[]) WITH ORDINALITY AS batch(type, data, n)
RETURNING id, seq
"""


def _insert_numbered(run: Run, events: Sequence[tuple[str, dict[str, Any]]]) -> list[RunEvent]:
    field = RunEvent._meta.get_field("data")
    datas = [field.get_prep_value(data) for _, data in events]  # NUL and surrogates cleaned
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            _INSERT_NUMBERED,
            {
                "count": len(events),
                "conversation": run.conversation_id,
                "run": run.pk,
                "now": now,
                "types": [type for type, _ in events],
                "datas": [json.dumps(data, cls=field.encoder) for data in datas],
            },
        )
        numbered = sorted(cursor.fetchall(), key=lambda row: row[1])
    if len(numbered) != len(events):
        raise Run.DoesNotExist(f"conversation {run.conversation_id} is gone")
    return [
        RunEvent(
            id=row_id,
            conversation_id=run.conversation_id,
            run=run,
            seq=seq,
            type=type,
            data=data,
            created_at=now,
        )
        for (row_id, seq), (type, _), data in zip(numbered, events, datas, strict=True)
    ]


def event_publish(*, run: Run, event: Event) -> RunEvent:
    """Store one event with the conversation's next seq; send it to live clients on commit."""
    return events_publish(run=run, events=[event])[0]


def _send(events: list[RunEvent]) -> None:
    """Send committed events to live clients: their messages made, then handed on.

    The messages are made here; then the waiters of this process on a run's
    end are told (chat/live/run_ends.py), and the layer sends the messages
    (chat/live/layers.py in this process, chat/live/sender.py over a network).
    """
    layer = get_channel_layer()
    # A POST waiting for the end hears of it alone, not of every delta: on the
    # layer's pub/sub channel of run ends where it has one (chat/live/run_ends.py),
    # else in the run's end group.
    published = layer is not None and hasattr(layer, "run_ends_channel")
    messages = []
    ended_runs = []
    for event in events:
        message = {"type": "run.event", "event": event_envelope(event)}
        messages.append((conversation_group(event.conversation_id), message))
        if event.type in WAIT_ENDS:
            if published:
                ended_runs.append(str(event.run_id))
            else:
                messages.append((run_end_group(event.run_id), message))
    for event in events:
        if event.type in WAIT_ENDS:
            run_end_notify(event.run_id)
    if layer is None:
        return
    if isinstance(layer, ThreadSafeInMemoryChannelLayer):
        # In this process: straight to the receivers' loops, no sender thread.
        deltas = [event for event in events if event.type == "message.delta"]
        layer.groups_send_soon(messages, streaming=deltas[0].run_id if deltas else None)
        return
    layer_send(layer, messages, ended_runs=ended_runs)
