"""Running one tool: in a thread with a deadline, its events relayed to the caller in order.

A thread cannot be killed: a tool past its deadline, or whose call was
cancelled from outside (`ToolContext.cancel`, when its run is), is abandoned:
the executor stops waiting, its later events are dropped and its resource
writes refused. An async tool is cancelled at its timeout.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.db import connections

from tools.context import ToolContext, call_sink
from tools.spec import ToolSpec

logger = logging.getLogger(__name__)

# An async tool is cancelled at its timeout; this is how long its cancellation
# may take before the executor stops waiting for it too.
ASYNC_CANCEL_GRACE_S = 0.5
# While a tool runs, how often the executor looks whether its call was cancelled.
CANCEL_POLL_S = 0.2


class Timeout(Exception):
    pass


@dataclass
class Outcome:
    value: Any = None
    exception: BaseException | None = None
    traceback: str = ""
    timed_out: bool = False
    cancelled: bool = False


def run_with_deadline(
    spec: ToolSpec,
    kwargs: dict[str, Any],
    context: ToolContext,
    *,
    late: Callable[[Outcome], None] | None = None,
) -> Outcome:
    """Run the tool in a thread; relay its events to the sink here until it ends or times out.

    A call cancelled from outside is given up on at once; if its tool ends
    after all (one that never looks at its context), `late` is told its real
    outcome in the tool's thread, so that the record can say what it did.
    """
    outcome = Outcome()
    relay = context._open_relay()
    ending = _Ending()

    def work() -> None:
        try:
            if spec.is_async:
                # async_to_sync rather than asyncio.run: the tool's thread-sensitive
                # sync_to_async calls (the ORM) then run in this thread, whose
                # connections are closed below.
                outcome.value = async_to_sync(run_async)(spec, kwargs, context)
            else:
                outcome.value = spec.bind(context, kwargs)
        except Timeout:
            outcome.timed_out = True
        except BaseException as exc:  # a tool's SystemExit is still just a failed call
            outcome.exception = exc
            outcome.traceback = traceback.format_exc()
        finally:
            if ending.ended() and late is not None:
                try:
                    late(outcome)
                except Exception:
                    logger.exception("tool %s: its late outcome was not stored", spec.name)
            # This thread's connections would otherwise stay open until the
            # process exits; a pool wants them back.
            connections.close_all()
            relay.put(None)

    thread = threading.Thread(
        target=work, name=f"tool-{spec.name}-{context.tool_call_id or 'call'}", daemon=True
    )
    deadline = time.monotonic() + spec.timeout + (ASYNC_CANCEL_GRACE_S if spec.is_async else 0)
    thread.start()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        if context.cancelled:
            # Cancelled from outside (its run was): stop waiting; the thread is
            # abandoned like a late one, and a cooperative tool has stopped already.
            drain(relay, context)
            if ending.given_up():
                return Outcome(cancelled=True)
            return outcome  # it had ended just now: what it did is known
        try:
            item = relay.get(timeout=min(remaining, CANCEL_POLL_S))
        except queue.Empty:
            continue
        if item is None:
            return outcome
        if context.sink is not None:
            call_sink(context.sink, *item)

    # Past the deadline. A thread cannot be killed: it is abandoned, its later
    # events dropped and its resource writes refused (ToolContext.cancel).
    context.cancel()
    drain(relay, context)
    return Outcome(timed_out=True)


class _Ending:
    """Who came first: the tool's end, or the executor giving up on it (one of them wins)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ended = False
        self._given_up = False

    def ended(self) -> bool:
        """The tool ended; True when the executor had given up on it (its end comes late)."""
        with self._lock:
            self._ended = True
            return self._given_up

    def given_up(self) -> bool:
        """The executor gives up on the tool; False when the tool had ended already."""
        with self._lock:
            self._given_up = not self._ended
            return self._given_up


def drain(relay: queue.SimpleQueue[Any], context: ToolContext) -> None:
    """Deliver the events a tool queued before it was given up on."""
    while True:
        try:
            item = relay.get_nowait()
        except queue.Empty:
            return
        if item is not None and context.sink is not None:
            call_sink(context.sink, *item)


async def run_async(spec: ToolSpec, kwargs: dict[str, Any], context: ToolContext) -> Any:
    # asyncio.wait rather than wait_for: a TimeoutError raised by the tool itself
    # is the tool's failure, not our timeout.
    task = asyncio.ensure_future(spec.bind(context, kwargs))
    done, _pending = await asyncio.wait({task}, timeout=spec.timeout)
    if task in done:
        return task.result()
    context.cancel()
    task.cancel()
    try:
        await task
    except BaseException:  # the tool's own answer to cancellation does not matter now
        logger.debug("async tool %s ended after its cancellation", spec.name, exc_info=True)
    raise Timeout
