"""A waited post's wait skips its first read of the run when every end reaches the process.

A wait that began before its run was dispatched (`begun`), in a process told
of every run end since (the runs are its own, or its subscription to run ends
was up before), knows without the database whether the end came first
(chat/live/run_ends.py `run_end_heard`). Where it cannot know, it reads, as
before: nothing that ended goes unseen.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from chat.live import run_ends
from chat.live.run_ends import run_end_heard, run_end_notify
from chat.live.run_wait import run_end_wait
from chat.live.subscription import run_ends_listen
from tests.assertions import wait_until_async
from tests.chat.live.test_streams import (
    end_with_event,
    end_without_event,
    make_run,
    pause_with_event,
    use_layer,
    waits_on_redis,
    worker_publishes_end,
)

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

__all__ = ["waits_on_redis"]  # a fixture of these tests


def reads_counted(monkeypatch) -> list[str]:
    """Every read of a run by a wait, by run id (a spy, not a mock)."""
    from chat.live import run_wait

    real = run_wait._run_stopped
    reads: list[str] = []

    async def counted(run_id: Any) -> bool:
        reads.append(str(run_id))
        stopped: bool = await real(run_id)
        return stopped

    monkeypatch.setattr(run_wait, "_run_stopped", counted)
    return reads


async def wait_begun(user: Any) -> tuple[Any, asyncio.Task[bool]]:
    """A post's run and its wait, begun before the run: waiting on its signal, not done."""
    begun = time.monotonic()
    run = await make_run(user)
    waiting = asyncio.create_task(run_end_wait(run=run, timeout=60, begun=begun))
    await waiting_on_signal(run, waiting)
    assert not waiting.done()
    return run, waiting


async def waiting_on_signal(run: Any, waiting: asyncio.Task[bool]) -> None:
    """Until the wait has registered for the run's end (or has returned)."""
    await wait_until_async(
        lambda: waiting.done() or str(run.pk) in run_ends._waiters,
        what="the wait to wait on its signal",
    )


@pytest.fixture
def in_process(settings, monkeypatch):
    """This process runs its own turns (the embedded default); no poll in time."""
    settings.TOOLCHAT_TASKS_IN_PROCESS = True
    use_layer(settings, "tests.chat.live.test_streams.LayerThatCannotReceive")
    monkeypatch.setattr("chat.live.streams.CATCH_UP_S", 30)


@pytest.mark.redis
async def test_a_wait_begun_on_a_subscription_already_up_reads_nothing_and_wakes_at_the_end(
    user, waits_on_redis, redis_url, monkeypatch
):
    assert await run_ends_listen(get_channel_layer()) is not None  # up, before the post
    reads = reads_counted(monkeypatch)
    run, waiting = await wait_begun(user)
    await end_without_event(run)
    await worker_publishes_end(redis_url, run)
    assert await asyncio.wait_for(waiting, 5) is True
    assert reads == []


@pytest.mark.redis
async def test_an_end_told_before_its_wait_began_is_found_without_a_read(
    user, waits_on_redis, redis_url, monkeypatch
):
    # The worker was quicker than the post's return to the event loop.
    await run_ends_listen(get_channel_layer())
    reads = reads_counted(monkeypatch)
    begun = time.monotonic()
    run = await make_run(user)
    await end_without_event(run)
    await worker_publishes_end(redis_url, run)
    await wait_until_async(lambda: run_end_heard(run.pk, begun), what="the end to be told")
    assert await asyncio.wait_for(run_end_wait(run=run, timeout=60, begun=begun), 5) is True
    assert reads == []


@pytest.mark.redis
async def test_a_wait_begun_before_the_subscription_came_up_reads_the_run_first(
    user, waits_on_redis, monkeypatch
):
    # This loop's first wait: an end published before the subscription was up is not
    # heard, so only the database can tell (the end here is told to nobody).
    reads = reads_counted(monkeypatch)
    begun = time.monotonic()
    run = await make_run(user)
    await end_without_event(run)
    assert await asyncio.wait_for(run_end_wait(run=run, timeout=60, begun=begun), 5) is True
    assert reads == [str(run.pk)]


async def test_a_wait_in_process_reads_nothing_and_wakes_at_the_ends_commit(
    user, in_process, monkeypatch
):
    reads = reads_counted(monkeypatch)
    run, waiting = await wait_begun(user)
    await end_with_event(run)
    assert await asyncio.wait_for(waiting, 5) is True
    assert reads == []


async def test_a_runs_earlier_pause_is_not_taken_for_the_end_a_later_wait_waits_for(
    user, in_process, monkeypatch
):
    # The run waited for a decision (a wait was told of that pause), was let go on, and a
    # new request waits for its next stop.
    run = await make_run(user)
    await pause_with_event(run)
    await database_sync_to_async(_resumed)(run)
    reads = reads_counted(monkeypatch)
    begun = time.monotonic()
    waiting = asyncio.create_task(run_end_wait(run=run, timeout=60, begun=begun))
    await waiting_on_signal(run, waiting)
    assert not waiting.done(), "the earlier pause was taken for the run's end"
    await end_with_event(run)
    assert await asyncio.wait_for(waiting, 5) is True
    assert reads == []


def _resumed(run: Any) -> None:
    from chat.models import Run, RunStatus

    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)


async def test_a_wait_whose_told_ends_were_forgotten_reads_the_run(user, in_process, monkeypatch):
    # More ends were told since the wait began than are kept: one of them might have been
    # this run's, so the database is asked.
    monkeypatch.setattr(run_ends, "HEARD_MAX", 2)
    reads = reads_counted(monkeypatch)
    begun = time.monotonic()
    run = await make_run(user)
    await end_without_event(run)  # ended, and nobody told
    for _ in range(3):
        run_end_notify(uuid.uuid4())
    assert run_end_heard(run.pk, begun) is None
    assert await asyncio.wait_for(run_end_wait(run=run, timeout=60, begun=begun), 5) is True
    assert reads == [str(run.pk)]


async def test_a_wait_without_a_beginning_reads_the_run_first(user, in_process, monkeypatch):
    reads = reads_counted(monkeypatch)
    run = await make_run(user)
    await end_without_event(run)
    assert await asyncio.wait_for(run_end_wait(run=run, timeout=60), 5) is True
    assert reads == [str(run.pk)]
