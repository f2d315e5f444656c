"""An in-memory channel layer that other threads can send to.

Without Redis, run events are published from background task threads (each
with its own event loop, through async_to_sync) while the sockets wait on the
ASGI server's loop. channels' InMemoryChannelLayer puts straight into the
receiver's asyncio.Queue, which is not thread-safe: the waiting socket would
not wake until something else woke its loop. This layer hands each send to
the loop that receives on the channel.

`group_send_soon` is the same from a thread that has no loop: the events of a
commit go straight from the committing thread to each receiver's loop,
without the hop through the event sender's thread (chat/live/sender.py) that
a network layer needs. Time to first token is what a user waits on.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import threading
import time
from typing import Any

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer

SEND_TIMEOUT_S = 5.0
# After handing streamed text to a socket's loop in this process, the run's thread
# lets go of the GIL this long. Otherwise the loop waited for it (Python gives it
# over after 5 ms) while the thread read the rest of a fast answer: the first token
# reached the client with the answer's end, not at its start (docs/performance.md,
# round eight). Wall time of the run's thread only, a fraction of a millisecond a call.
DELTA_HANDOFF_YIELD_S = 0.0002
# At most once this often in a run, whatever TOOLCHAT_DELTA_INTERVAL_S says (0
# sends every token): the wait that matters is the first token's.
DELTA_HANDOFF_YIELD_EVERY_S = 0.05
_yields = threading.local()


class ThreadSafeInMemoryChannelLayer(InMemoryChannelLayer):
    """InMemoryChannelLayer whose sends run on the receiving channel's event loop."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loops: dict[str, asyncio.AbstractEventLoop] = {}

    async def receive(self, channel: str) -> Any:
        self._loops[channel] = asyncio.get_running_loop()
        return await super().receive(channel)

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        loop = self._loops.get(channel)
        if loop is None or not loop.is_running() or loop is asyncio.get_running_loop():
            await super().send(channel, message)
            return
        future = asyncio.run_coroutine_threadsafe(super().send(channel, message), loop)
        # A receiver stuck for this long is as good as gone; the event is stored
        # and reaches it through the stream's catch-up from the database.
        await asyncio.wait_for(asyncio.wrap_future(future), SEND_TIMEOUT_S)

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        # Called from task threads while the ASGI loop changes the groups: work on
        # a snapshot (list() of a dict is atomic under the GIL), and leave the
        # expiry sweep to the loop that owns the queues.
        for channel in list(self.groups.get(group, {})):
            with contextlib.suppress(ChannelFull):
                await self.send(channel, message)

    def group_send_soon(self, group: str, message: dict[str, Any]) -> int:
        """Queue `message` for every channel of `group`, from any thread, without waiting.

        Each channel gets it on the loop that receives on it, in the order of
        the calls; a channel that has not received yet (its loop unknown) gets it
        in its queue now, as `send` would. A full channel drops it (the stream
        reads it from the database). Returns how many were handed to a loop.
        """
        handed = 0
        for channel in list(self.groups.get(group, {})):
            loop = self._loops.get(channel)
            if loop is None or not loop.is_running():
                self._put(channel, message)
                continue
            with contextlib.suppress(RuntimeError):  # its loop closed meanwhile
                loop.call_soon_threadsafe(self._put, channel, message)
                handed += 1
        return handed

    def groups_send_soon(
        self, messages: list[tuple[str, dict[str, Any]]], *, streaming: Any
    ) -> None:
        """`group_send_soon` for each (group, message), in order, from the committing thread.

        `streaming` is the id of the run whose text the messages carry (None
        when they carry none): once some were handed to a loop, this thread
        lets the loop take the GIL (`DELTA_HANDOFF_YIELD_S`).
        """
        handed = sum(self.group_send_soon(group, message) for group, message in messages)
        if handed and streaming is not None:
            _handoff_yield(streaming)

    def _put(self, channel: str, message: dict[str, Any]) -> None:
        queue = self.channels.setdefault(channel, asyncio.Queue(maxsize=self.get_capacity(channel)))
        with contextlib.suppress(asyncio.QueueFull):
            queue.put_nowait((time.time() + self.expiry, copy.deepcopy(message)))

    async def group_discard(self, group: str, channel: str) -> None:
        await super().group_discard(group, channel)
        if not any(channel in members for members in self.groups.values()):
            self._loops.pop(channel, None)

    async def flush(self) -> None:
        await super().flush()
        self._loops.clear()


def _handoff_yield(run_id: Any) -> None:
    """Let a loop of this process take the GIL (see DELTA_HANDOFF_YIELD_S); never on a loop."""
    now = time.monotonic()
    if getattr(_yields, "run", None) == run_id and now - _yields.last < DELTA_HANDOFF_YIELD_EVERY_S:
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        _yields.run, _yields.last = run_id, now
        time.sleep(DELTA_HANDOFF_YIELD_S)
