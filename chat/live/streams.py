"""Live event delivery: stored events first, then live ones, merged by seq.

The channel layer delivers at most once: it drops messages when a consumer is
slow (its channel is full) or while a socket reconnects. The database holds
every event with a seq that is contiguous per conversation, so a stream here
is a cursor over the database that the channel layer only wakes up early:

1. subscribe to the conversation's group first, so nothing published from now
   on is missed;
2. replay what is stored after the client's cursor;
3. take live events: the next seq is yielded as it comes; a jump (something
   was dropped) or a quiet second sends the cursor back to the database.

Nothing is yielded twice (seq only grows) and nothing is skipped (a gap is
filled from the rows). The WebSocket consumer and the SSE endpoints both use
`event_stream`.

Because the database is the source of truth, a channel layer that fails (Redis
gone, a read that timed out) never ends a stream: it reads the database every
CATCH_UP_S instead, and tries the layer again LAYER_RETRY_S later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from chat.live.events import conversation_group, event_envelope
from chat.live.run_ends import TERMINAL_EVENTS
from chat.live.subscription import FAILED, Subscription, subscription
from chat.models import Conversation, Run, RunStatus
from chat.selectors import stored_events
from chat.telemetry.metrics import event_lag_observe

ENDED_STATUSES = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
# How long a stream waits on the channel layer, after a live event, before it
# looks at the database anyway (a dropped message with nothing after it would
# otherwise wait forever); it waits twice as long each time it finds nothing.
CATCH_UP_S = 1.0
MAX_CATCH_UP_S = 8.0
# Cursors beyond this are not seqs (and would overflow the database's bigint).
MAX_SEQ = 2**62
REPLAY_BATCH = 500
# After the channel layer failed, how long a stream reads only the database
# before it tries the layer again.
LAYER_RETRY_S = 5.0
# What a closing stream sends its own channel to end its pending receive.
STREAM_CLOSED = "toolchat.stream.closed"

logger = logging.getLogger(__name__)


def _stored_read(
    conversation_id: Any,
    after: int,
    *,
    before: int | None = None,
    run_id: Any | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    events = stored_events(
        conversation_id=conversation_id, after=after, before=before, run_id=run_id, limit=limit
    )
    return [event_envelope(event) for event in events]


_stored = database_sync_to_async(_stored_read)


@database_sync_to_async
def _ended_then_stored(
    conversation_id: Any, after: int, *, run_id: Any, check_end: bool
) -> tuple[bool, list[dict[str, Any]]]:
    """Whether the run had ended (when `check_end`), then the first batch stored after `after`.

    Read in that order (see `event_stream`), in one hand-off to a thread: a
    stream's catch-up took two, each a few hundred microseconds of the event
    loop's CPU under load (docs/gateway.md, round fifteen).
    """
    ended = check_end and Run.objects.filter(pk=run_id, status__in=ENDED_STATUSES).exists()
    batch = _stored_read(conversation_id, after, run_id=run_id, limit=REPLAY_BATCH)
    return ended, batch


async def event_stream(
    *,
    conversation_id: Any,
    after: int = 0,
    run_id: Any | None = None,
    until_run_ends: bool = False,
) -> AsyncIterator[dict[str, Any]]:
    """Yield event envelopes after `after`: stored ones, then live ones, in seq order, once each.

    With `run_id`, only that run's events; with `until_run_ends`, the stream
    ends after the run's terminal event (or at once if the run had already
    ended before `after`).
    """
    cursor = min(max(after, 0), MAX_SEQ)
    live = _Live(conversation_id)
    try:
        while True:
            # (Re)subscribe before reading the database, so that nothing
            # published between the two is missed.
            await live.subscribe()
            # Whether the run had ended is read before the events: the status and
            # the terminal event commit together, so if it had, the read below
            # holds that event (read after, the two could straddle the commit).
            ended, batch = await _ended_then_stored(
                conversation_id,
                cursor,
                run_id=run_id,
                check_end=until_run_ends and run_id is not None,
            )
            # Catch up from the database: the replay, or the filling of a gap.
            while True:
                for envelope in batch:
                    cursor = envelope["seq"]
                    yield envelope
                    if until_run_ends and envelope["type"] in TERMINAL_EVENTS:
                        return
                if len(batch) < REPLAY_BATCH:
                    break
                batch = await _stored(conversation_id, cursor, run_id=run_id, limit=REPLAY_BATCH)
            if ended:
                return  # its terminal event was at or before the cursor
            # Live: take events as they come while they follow on from the cursor.
            while (envelope := await live.following(cursor, run_id)) is not None:
                cursor = envelope["seq"]
                event_lag_observe(envelope["ts"])
                yield envelope
                if until_run_ends and envelope["type"] in TERMINAL_EVENTS:
                    return
    finally:
        await live.unsubscribe()


class _Live:
    """A stream's side of the channel layer: its subscription and its one pending receive."""

    def __init__(self, conversation_id: Any) -> None:
        self.conversation_id = conversation_id
        self.loop = asyncio.get_running_loop()
        self.layer = get_channel_layer()
        self.group = conversation_group(conversation_id)
        self.channel: str | None = None
        # Subscribed and not failed since; while False, the database is polled.
        self.listening = False
        self.retry_at = 0.0
        self.idle_wait = CATCH_UP_S
        # One receive at a time, kept across quiet spells rather than cancelled at
        # each timeout (see _unsubscribe).
        self.receiving: asyncio.Future[Any] | None = None
        # With chat.live.redis_layer's layer, the process's one subscription puts them in a queue.
        self.hub: Subscription | None = None
        self.queue: asyncio.Queue[dict[str, Any]] | None = None

    async def subscribe(self) -> None:
        """Join the conversation's group, unless joined, or the layer failed and is not due again."""
        if self.layer is None or self.listening or self.loop.time() < self.retry_at:
            return
        try:
            if hasattr(self.layer, "group_channel"):
                self.hub = subscription(self.layer)
                self.queue = asyncio.Queue(maxsize=self.layer.capacity)
                await self.hub.join(self.group, self.queue)
            else:
                if self.channel is None:
                    self.channel = await self.layer.new_channel()
                await self.layer.group_add(self.group, self.channel)
            self.listening = True
            # The database is read next: until a live event comes, nothing can
            # have been dropped (the layer drops only into a full channel), so
            # a quiet stream looks again only after the longest wait. A page's
            # idle socket read the database a second after opening, then at 3,
            # 7 and 15 s: a hundred sockets opened at once read it a hundred
            # times a second while their users posted (bench/ws_posts.py).
            self.idle_wait = MAX_CATCH_UP_S
        except Exception as exc:
            self._failed(exc)

    async def following(self, cursor: int, run_id: Any | None) -> dict[str, Any] | None:
        """The live envelope right after `cursor`; None when the database must be read.

        That is when it is quiet, the layer failed, another run's event came
        (the database sorts out the cursor), or a seq was skipped (something
        was dropped: the database fills the gap).
        """
        while True:
            envelope = await self._receive()
            if envelope is None:
                return None
            seq = envelope.get("seq", 0)
            if seq <= cursor:
                continue  # already delivered (replayed, or a duplicate)
            if run_id is not None and envelope.get("run_id") != str(run_id):
                return None
            return envelope if seq == cursor + 1 else None

    async def _receive(self) -> dict[str, Any] | None:
        """The next live envelope; None after a quiet spell or when the layer fails."""
        if self.queue is not None and self.listening:
            return await self._queued(self.queue)
        if self.layer is None or self.channel is None or not self.listening:
            await asyncio.sleep(CATCH_UP_S)
            return None
        if self.receiving is None:
            self.receiving = asyncio.ensure_future(self.layer.receive(self.channel))
        done, _ = await asyncio.wait({self.receiving}, timeout=self.idle_wait)
        if not done:
            # Quiet: look at the database, less often the longer it stays quiet.
            self.idle_wait = min(self.idle_wait * 2, MAX_CATCH_UP_S)
            return None
        try:
            message = self.receiving.result()
        except Exception as exc:
            # Redis' own errors (its read timeout included) land here. The
            # database carries on until the layer is back.
            self._failed(exc)
            return None
        finally:
            if self.receiving.done():
                self.receiving = None
        self.idle_wait = CATCH_UP_S
        envelope: dict[str, Any] = message.get("event") or {}
        return envelope

    async def _queued(self, queue: asyncio.Queue[dict[str, Any]]) -> dict[str, Any] | None:
        try:
            message = await asyncio.wait_for(queue.get(), self.idle_wait)
        except TimeoutError:
            self.idle_wait = min(self.idle_wait * 2, MAX_CATCH_UP_S)
            return None
        if message is FAILED:
            self._failed(ConnectionError("the subscription to Redis failed"))
            return None
        self.idle_wait = CATCH_UP_S
        envelope: dict[str, Any] = message.get("event") or {}
        return envelope

    def _failed(self, exc: Exception) -> None:
        layer_failed(self.conversation_id, exc)
        self.listening = False
        self.retry_at = self.loop.time() + LAYER_RETRY_S
        if self.hub is not None and self.queue is not None:
            self.hub.leave(self.group, self.queue)
            self.queue = None

    async def unsubscribe(self) -> None:
        """Stop following the group (see `_unsubscribe`)."""
        if self.hub is not None and self.queue is not None:
            self.hub.leave(self.group, self.queue)
            return
        await layer_unsubscribe(self.layer, self.group, self.channel, self.receiving)


async def layer_unsubscribe(
    layer: Any, group: str, channel: str | None, receiving: asyncio.Future[Any] | None
) -> None:
    """Leave the group; a receive still waiting is woken by a message, not cancelled.

    Under load, cancelling a channels_redis receive that is blocked on Redis
    was seen to take more than a minute to finish (the cancellation is
    absorbed and the blocking pop goes on), and the stream's caller waited for
    it. A message to the stream's own channel ends the receive the normal way;
    nothing waits for it.
    """
    if receiving is not None and not receiving.done():
        receiving.add_done_callback(_receive_dropped)
        try:
            await layer.send(channel, {"type": STREAM_CLOSED})
        except Exception:
            receiving.cancel()
    if layer is not None and channel is not None:
        with contextlib.suppress(Exception):
            await layer.group_discard(group, channel)


def _receive_dropped(receiving: asyncio.Future[Any]) -> None:
    if not receiving.cancelled():
        receiving.exception()  # retrieved, so that asyncio does not log it


def layer_failed(conversation_id: Any, exc: Exception) -> None:
    logger.warning(
        "channel layer failed (%s: %s); conversation %s is read from the database, "
        "the layer is tried again in %ss",
        type(exc).__name__,
        exc,
        conversation_id,
        LAYER_RETRY_S,
    )


def run_event_stream(*, run: Run, after: int = 0) -> AsyncIterator[dict[str, Any]]:
    """One run's events after `after`, ending with its terminal event."""
    return event_stream(
        conversation_id=run.conversation_id, after=after, run_id=run.pk, until_run_ends=True
    )


@database_sync_to_async
def conversation_cursor(conversation_id: Any) -> int:
    """The conversation's latest seq: where a live-only stream starts."""
    value = (
        Conversation.objects.filter(pk=conversation_id)
        .values_list("last_event_seq", flat=True)
        .first()
    )
    return int(value or 0)


async def stored_between(conversation_id: Any, after: int, before: int) -> list[dict[str, Any]]:
    """Stored events with after < seq < before, in order (a bounded replay)."""
    events: list[dict[str, Any]] = await _stored(conversation_id, after, before=before)
    return events
