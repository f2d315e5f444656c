"""One pub/sub subscription per event loop of a web process: the runs' ends and the groups' events.

With chat.live.redis_layer's layer, a worker publishes what a commit sends
(`RedisChannelLayer.group_send_now`): each group message on its group's
pub/sub channel (`group_channel`), and each ended run's id on the channel of
run ends. A web process keeps one connection to Redis per event loop, which
subscribes to the run ends for good and to a group's channel while someone in
the process follows it (`Subscription.join`, `leave`):

- a stream (chat/live/streams.py) joins its conversation's group with a
  queue of its own; the first to join a group subscribes (one round trip,
  awaited, so that nothing published after it is missed), the last to leave
  unsubscribes; each message is decoded once and put in every queue that
  follows the group;
- a run's end calls `run_end_notify` (chat/live/run_ends.py), which wakes the
  process's waited posts.

Before, every stream made a channel of its own and added it to the group,
held a blocking receive on Redis, sent itself a message to end that receive
and left the group: five commands a request, and a worker read every group's
members before adding a copy of each message to each member's channel. Now a
stream costs at most a SUBSCRIBE and an UNSUBSCRIBE on a connection already
open, and a commit's events one PUBLISH each.

Pub/sub delivers at most once, as the channel layer did: a queue that is full
drops (its stream sees the seq jump and reads the database), and a
connection that fails puts `FAILED` in every queue (a full one drops its
oldest message for it), whose streams read the database until they join
again. One message decoded is shared by every queue of its group: nothing
changes it. The database holds every event.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import time
import weakref
from typing import Any

from chat.live.run_ends import run_end_notify

logger = logging.getLogger(__name__)

# How long a wait lets the loop's first subscription come up before it reads the
# database anyway, and how long a join waits for its SUBSCRIBE's answer; and how
# long a failed subscription waits before it tries again.
SUBSCRIBE_WAIT_S = 1.0
LISTEN_RETRY_S = 1.0
# A subscription quiet this long is sent a PING, and opened again when nothing
# comes back within PONG_WAIT_S. A connection a NAT or a proxy dropped, or a hung
# Redis, gives no error; without the PING every later end would go unheard, and
# the waits would end only from their reads of the database (seconds each).
KEEPALIVE_S = 15.0
PONG_WAIT_S = 5.0
# What a queue is given when the connection it was fed by failed.
FAILED: dict[str, Any] = {"type": "toolchat.subscription.failed"}


class Subscription:
    """One loop's connection to the workers' publishes (see the module)."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.subscribed = asyncio.Event()  # up, and subscribed to the run ends
        # Since when (time.monotonic()) it has been: every end published
        # after that reaches this process, or the connection fails (None while down).
        self.up_since: float | None = None
        self.first_try = True  # a wait lets the first subscription come up
        self.pubsub: Any = None
        self.heard_at = 0.0  # the loop's time of the last reply read on the connection
        # A group's pub/sub channel: the queues of this loop that follow it.
        self.queues: dict[str, set[asyncio.Queue[dict[str, Any]]]] = {}
        # SUBSCRIBEs sent and answered, a channel's each, on this connection.
        self.asked: dict[str, int] = {}
        self.answered: dict[str, int] = {}
        self.answer = asyncio.Condition()
        # A channel's last SUBSCRIBE or UNSUBSCRIBE on its way out: each waits for the
        # one before, so that they reach Redis in the order they were asked.
        self.sending: dict[str, asyncio.Task[None]] = {}
        # In a context of its own: the request that starts it must not lend it
        # its context (its thread, which asgiref refuses once it has ended, and
        # its trace) for the life of the process.
        loop = asyncio.get_running_loop()
        self.task = loop.create_task(self._listen(), context=contextvars.Context())
        # Its loop closed (the task cancelled with it): forgotten, with the loop.
        self.task.add_done_callback(lambda _: _forget(loop, self))

    async def join(self, group: str, queue: asyncio.Queue[dict[str, Any]]) -> None:
        """Put the group's messages in `queue` from now on; raises if that cannot be promised.

        Returns once Redis has taken the subscription (at once when this loop
        follows the group already), so that nothing published later is missed.
        """
        await self.up()
        pubsub = self.pubsub
        if pubsub is None:
            raise ConnectionError("the subscription to Redis is down")
        channel = self.layer.group_channel(group)
        following = self.queues.setdefault(channel, set())
        first = not following
        following.add(queue)
        if first:
            self.asked[channel] = self.asked.get(channel, 0) + 1
        asked = self.asked.get(channel, 0)
        if self.answered.get(channel, 0) >= asked:
            return  # followed already, and subscribed
        try:
            if first:
                # Shielded: a joiner cancelled here (its client went) must not take
                # back a SUBSCRIBE others wait for, nor cut the shared connection
                # mid-write (redis-py drops it on an error while it sends).
                await asyncio.shield(self._send(channel, pubsub, "subscribe"))
            async with asyncio.timeout(SUBSCRIBE_WAIT_S), self.answer:
                await self.answer.wait_for(
                    lambda: self.pubsub is not pubsub or self.answered.get(channel, 0) >= asked
                )
            if self.pubsub is not pubsub:
                raise ConnectionError("the subscription to Redis failed while joining")
        except BaseException:
            self.leave(group, queue)
            raise

    def leave(self, group: str, queue: asyncio.Queue[dict[str, Any]]) -> None:
        """Stop putting the group's messages in `queue`; the last to leave unsubscribes."""
        channel = self.layer.group_channel(group)
        following = self.queues.get(channel)
        if following is None:
            return
        following.discard(queue)
        if following:
            return
        del self.queues[channel]
        self.asked.pop(channel, None)
        self.answered.pop(channel, None)
        if self.pubsub is not None:
            # Sent soon, answered on the reading side; nobody waits for it.
            self._send(channel, self.pubsub, "unsubscribe")

    def _send(self, channel: str, pubsub: Any, command: str) -> asyncio.Task[None]:
        """SUBSCRIBE or UNSUBSCRIBE the channel, after the channel's command before it.

        Not sent when the connection it was asked on has failed meanwhile: a
        closed PubSub would open a connection of its own that nobody reads.
        """
        before = self.sending.get(channel)

        async def send() -> None:
            if before is not None:
                await asyncio.wait({before})
            if self.pubsub is pubsub:
                await getattr(pubsub, command)(channel)

        sending = self.task.get_loop().create_task(send(), context=contextvars.Context())
        self.sending[channel] = sending
        sending.add_done_callback(lambda done: self._sent(channel, done))
        return sending

    def _sent(self, channel: str, done: asyncio.Task[None]) -> None:
        if self.sending.get(channel) is done:
            del self.sending[channel]
        if not done.cancelled() and done.exception() is not None:
            logger.debug("a subscription command failed: %r", done.exception())

    async def up(self) -> None:
        """Let the loop's first subscription come up, up to SUBSCRIBE_WAIT_S (never raises)."""
        if self.first_try and not self.subscribed.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.subscribed.wait(), SUBSCRIBE_WAIT_S)

    async def _listen(self) -> None:
        channel = self.layer.run_ends_channel()
        while True:
            client = self.layer.subscription_client()
            pubsub = client.pubsub()
            try:
                await pubsub.subscribe(channel)
                self.pubsub = pubsub
                await self._read(pubsub, channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning(
                    "the subscription to run ends failed (%s: %s); waits and streams read the "
                    "database until it is back, tried again in %.0f s",
                    type(exc).__name__,
                    exc,
                    LISTEN_RETRY_S,
                )
            finally:
                self._failed()
                for closing in (pubsub, client):
                    with contextlib.suppress(Exception):
                        await closing.aclose()
                # Joins waiting for an answer give up now, not at their timeout.
                with contextlib.suppress(Exception):
                    async with self.answer:
                        self.answer.notify_all()
            await asyncio.sleep(LISTEN_RETRY_S)

    def _failed(self) -> None:
        """The connection is gone: every queue is told, and followed no more."""
        self.pubsub = None
        self.subscribed.clear()
        self.up_since = None
        self.first_try = False
        for following in self.queues.values():
            for queue in following:
                _tell_failed(queue)
        self.queues.clear()
        self.asked.clear()
        self.answered.clear()

    async def _read(self, pubsub: Any, run_ends: str) -> None:
        """Hand on each message; raises when the connection stops answering (see KEEPALIVE_S).

        Each read waits with no timeout of its own: a timeout a read (redis-py
        schedules and cancels a timer for each) was a third of a message's CPU
        (bench/subscription_read.py). A task beside it, `_keepalive`, watches
        for quiet and ends the read when a PING goes unanswered.
        """
        loop = asyncio.get_running_loop()
        self.heard_at = loop.time()
        watch: asyncio.Task[None] | None = None
        try:
            async with asyncio.timeout(None) as deadline:
                watch = loop.create_task(
                    self._keepalive(pubsub, deadline), context=contextvars.Context()
                )
                while True:
                    # None also when redis-py consumed a reply itself (a health check's
                    # pong, a RESP3 push): heard all the same.
                    message = await pubsub.get_message(timeout=None)
                    self.heard_at = loop.time()
                    if message is None:
                        continue
                    try:
                        await self._take(message, run_ends)
                    except Exception:
                        # One message that cannot be read must not end every stream's
                        # subscription.
                        logger.exception("a message on the subscription could not be handed on")
        except TimeoutError:
            raise ConnectionError(f"no answer to a PING in {PONG_WAIT_S:g} s") from None
        finally:
            if watch is not None:
                watch.cancel()
                await asyncio.wait({watch})  # raises nothing of the watch's own

    async def _keepalive(self, pubsub: Any, deadline: asyncio.Timeout) -> None:
        """PING after KEEPALIVE_S of quiet; nothing heard within PONG_WAIT_S ends `_read`'s wait."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                quiet_until = self.heard_at + KEEPALIVE_S
                if loop.time() < quiet_until:
                    await asyncio.sleep(quiet_until - loop.time())
                    continue
                asked = loop.time()
                await pubsub.ping()
                await asyncio.sleep(PONG_WAIT_S)
                if self.heard_at < asked:
                    break
        except Exception as exc:  # the PING could not be sent: the connection is gone
            logger.debug("the subscription's PING failed: %r", exc)
        deadline.reschedule(loop.time())  # `_read`'s wait ends, as a TimeoutError

    async def _take(self, message: dict[str, Any], run_ends: str) -> None:
        kind = message["type"]
        channel = _text(message.get("channel"))
        if kind == "message" and channel == run_ends:
            run_end_notify(_text(message["data"]))
        elif kind == "message":
            following = self.queues.get(channel)
            if following:
                decoded = json.loads(message["data"])
                for queue in following:
                    _put(queue, decoded)
        elif kind == "subscribe" and channel == run_ends:
            # Read after Redis took the SUBSCRIBE: what is published from now on comes here.
            self.up_since = time.monotonic()
            self.subscribed.set()
            self.first_try = False
        elif kind == "subscribe" and channel in self.asked:
            self.answered[channel] = self.answered.get(channel, 0) + 1
            async with self.answer:
                self.answer.notify_all()


def _put(queue: asyncio.Queue[dict[str, Any]], message: dict[str, Any]) -> None:
    # A full queue drops: its stream sees the next seq jump and reads the database.
    with contextlib.suppress(asyncio.QueueFull):
        queue.put_nowait(message)


def _tell_failed(queue: asyncio.Queue[dict[str, Any]]) -> None:
    """FAILED into the queue, full or not: its stream reads the database once told."""
    if queue.full():
        with contextlib.suppress(asyncio.QueueEmpty):
            queue.get_nowait()  # what it drops, the database has
    _put(queue, FAILED)


def _forget(loop: asyncio.AbstractEventLoop, ended: Subscription) -> None:
    if _subscriptions.get(loop) is ended:
        del _subscriptions[loop]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_subscriptions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Subscription] = (
    weakref.WeakKeyDictionary()
)


def subscription(layer: Any) -> Subscription:
    """This loop's subscription to the workers' publishes, started on first use."""
    loop = asyncio.get_running_loop()
    current = _subscriptions.get(loop)
    if current is None or current.task.done() or current.layer is not layer:
        if current is not None and not current.task.done():
            current.task.cancel()
        current = _subscriptions[loop] = Subscription(layer)
    return current


async def run_ends_listen(layer: Any) -> float | None:
    """Make sure this loop hears of the workers' run ends (see the module); never raises.

    The loop's first call waits for the subscription, up to SUBSCRIBE_WAIT_S,
    so that its waiter misses no end; later calls find it up (or, while
    Redis is unreachable, trying again) and return at once. Returns since when
    (`time.monotonic()`) every end published reaches this process: None while
    the subscription is down.
    """
    listening = subscription(layer)
    await listening.up()
    return listening.up_since
