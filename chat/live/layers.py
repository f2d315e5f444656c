"""An in-memory channel layer that other threads can send to.

Without Redis, run events are published from background task threads (each
with its own event loop, through async_to_sync) while the sockets wait on the
ASGI server's loop. channels' InMemoryChannelLayer puts straight into the
receiver's asyncio.Queue, which is not thread-safe: the waiting socket would
not wake until something else woke its loop. This layer hands each send to
the loop that receives on the channel.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer

SEND_TIMEOUT_S = 5.0


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

    async def group_discard(self, group: str, channel: str) -> None:
        await super().group_discard(group, channel)
        if not any(channel in members for members in self.groups.values()):
            self._loops.pop(channel, None)

    async def flush(self) -> None:
        await super().flush()
        self._loops.clear()
