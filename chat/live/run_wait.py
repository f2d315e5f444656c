"""A waited post's wait for its run's end (`POST …/messages/?wait=true`, a /v1 answer not streamed).

It needs the run's end, not its events (chat/live/run_ends.py); the
database is read after every quiet spell, as a stream reads it
(chat/live/streams.py), so a missed signal costs seconds, never the wait.
It is read at the start too, unless the wait began before its run was
dispatched (`begun`) and every end since has reached this process: then the
end, if it came first, was told already (`run_end_heard`).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings

from chat.live import streams
from chat.live.events import run_end_group
from chat.live.run_ends import WAIT_ENDS, run_end_heard, run_end_signal
from chat.live.streams import ENDED_STATUSES, layer_failed, layer_unsubscribe
from chat.live.subscription import run_ends_listen
from chat.models import Run, RunStatus

# Where a waited post stops waiting: the end, or a pause until a person decides.
STOPPED_STATUSES = ENDED_STATUSES | {RunStatus.AWAITING_APPROVAL}


@database_sync_to_async
def _run_stopped(run_id: Any) -> bool:
    return Run.objects.filter(pk=run_id, status__in=STOPPED_STATUSES).exists()


async def run_end_wait(*, run: Run, timeout: float, begun: float | None = None) -> bool:
    """Wait until the run has ended or waits for a person (True), or `timeout` seconds
    have passed (False).

    `begun`: a `time.monotonic()` taken before the run was dispatched (its post's
    start), for a wait that may then skip its first read of the database.

    For `POST .../messages/?wait=true`, which needs the end and not the events;
    a run that waits for an approval goes no further until someone decides, and
    the one who waits may be that someone (chat/live/run_ends.py `WAIT_ENDS`).
    Where runs execute in this process (no Redis), the end's commit wakes it
    directly; with chat.live.redis_layer's layer, the workers' publish of the
    end does (chat/live/run_ends.py). With another layer (channels_redis' own,
    for Sentinel), the run's terminal event, which goes out only once the end
    has committed, ends it: the wait listens to the run's end group, not to
    the conversation's every event. The database is read at the start and
    after every quiet spell (streams.CATCH_UP_S, doubling up to streams.MAX_CATCH_UP_S), so a
    dropped message or a failed layer costs seconds, never the whole wait.
    """
    if settings.TOOLCHAT_TASKS_IN_PROCESS:
        # Every run ends in this process, which is told of each end as it commits.
        return await _run_end_wait_here(run, timeout, told_since=begun)
    layer = get_channel_layer()
    if hasattr(layer, "run_ends_channel"):
        up_since = await run_ends_listen(layer)
        told = begun is not None and up_since is not None and up_since <= begun
        return await _run_end_wait_here(run, timeout, told_since=begun if told else None)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    group = run_end_group(run.pk)
    channel: str | None = None
    listening = False
    receiving: asyncio.Future[Any] | None = None
    idle_wait = streams.CATCH_UP_S
    try:
        if layer is not None:
            try:
                channel = await layer.new_channel()
                await layer.group_add(group, channel)
                listening = True
            except Exception as exc:
                layer_failed(run.conversation_id, exc)
        while True:
            if await _run_stopped(run.pk):
                return True
            check_at = min(loop.time() + idle_wait, deadline)
            idle_wait = min(idle_wait * 2, streams.MAX_CATCH_UP_S)
            while loop.time() < check_at:
                if not listening or channel is None:
                    await asyncio.sleep(check_at - loop.time())
                    break
                if receiving is None:
                    receiving = asyncio.ensure_future(layer.receive(channel))
                done, _ = await asyncio.wait({receiving}, timeout=check_at - loop.time())
                if not done:
                    break
                try:
                    envelope = receiving.result().get("event") or {}
                except Exception as exc:
                    layer_failed(run.conversation_id, exc)
                    listening = False  # the database alone, until the wait ends
                    break
                finally:
                    receiving = None
                if envelope.get("type") in WAIT_ENDS and envelope.get("run_id") == str(run.pk):
                    return True  # sent only once the end committed
            if loop.time() >= deadline:
                return bool(await _run_stopped(run.pk))
    finally:
        await layer_unsubscribe(layer, group, channel, receiving)


async def _run_end_wait_here(run: Run, timeout: float, *, told_since: float | None) -> bool:
    """`run_end_wait` on this process's signal of the end (chat/live/run_ends.py).

    The database is read first (the run may have ended before the signal was
    set up), unless every end since `told_since` has been told to this process:
    then the end was told already, or is still to come. It is read after every
    quiet spell too (an end this process was not told of).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    idle_wait = streams.CATCH_UP_S
    with run_end_signal(run.pk) as ended:
        heard = None if told_since is None else run_end_heard(run.pk, told_since)
        if heard or (heard is None and await _run_stopped(run.pk)):
            return True
        while True:
            left = deadline - loop.time()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ended.wait(), min(idle_wait, left))
                return True
            idle_wait = min(idle_wait * 2, streams.MAX_CATCH_UP_S)
            if await _run_stopped(run.pk):
                return True
