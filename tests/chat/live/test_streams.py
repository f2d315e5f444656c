"""event_stream when the channel layer fails: the database still delivers every event.

The layer only wakes a stream early; the stored events are the source of
truth. So a layer that cannot be read (redis-py's read timeout, a Redis that
is gone) may slow a stream down to polling, but never end or break it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
import redis.exceptions
from channels.db import database_sync_to_async

from chat.live.event_types import Event
from chat.live.events import event_publish
from chat.live.layers import ThreadSafeInMemoryChannelLayer
from chat.live.run_wait import run_end_wait
from chat.live.streams import event_stream
from chat.selectors import stored_events
from tests.assertions import wait_until_async
from tests.factories import ConversationFactory, RunFactory, event_make
from tests.plugins.services import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


class LayerThatCannotReceive(ThreadSafeInMemoryChannelLayer):
    """Sends work, every read fails: what redis-py 8's 5 s read timeout did to BZPOPMIN."""

    async def receive(self, channel: str) -> Any:
        raise redis.exceptions.TimeoutError("Timeout reading from 127.0.0.1:6379")


class LayerWhoseReceiveOutlivesCancel(ThreadSafeInMemoryChannelLayer):
    """A receive that, cancelled, goes on until a message comes: what channels_redis was
    seen doing under load (a cancelled blocking pop took over a minute to end)."""

    async def receive(self, channel: str) -> Any:
        try:
            return await super().receive(channel)
        except asyncio.CancelledError:
            pass  # absorbed: the pop goes on, for half a minute (the tests wait 10 s)
        async with asyncio.timeout(30):
            return await super().receive(channel)


def use_layer(settings, backend: str, **config: Any) -> None:
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": backend, "CONFIG": config}}


@pytest.fixture(autouse=True)
def _quick_polls(monkeypatch):
    # Without a layer, a stream reads the database every CATCH_UP_S, and `produce`
    # waits for each event in turn: a shorter poll keeps these tests quick.
    monkeypatch.setattr("chat.live.streams.CATCH_UP_S", 0.2)


@database_sync_to_async
def make_run(user):
    return RunFactory(conversation=ConversationFactory(owner=user))


@database_sync_to_async
def publish(run, event: Event) -> int:
    return event_publish(run=run, event=event).seq


def looks_recorded(monkeypatch) -> set[str]:
    """The runs whose waits have read the database and found them going on (a spy, not a mock).

    A wait registers for its signal, then reads the run once: an end that
    commits before that read is found by it, and the signal is not tested.
    Waiting until the read found the run going on, instead of a guessed sleep,
    makes the end the test commits next reach the wait by the signal alone.
    """
    from chat.live import run_wait

    real = run_wait._run_stopped
    looked: set[str] = set()

    async def recorded(run_id: Any) -> bool:
        stopped: bool = await real(run_id)
        if not stopped:
            looked.add(str(run_id))
        return stopped

    monkeypatch.setattr(run_wait, "_run_stopped", recorded)
    return looked


async def looked_at(looked: set[str], *runs: Any) -> None:
    """Until each run's wait has read it once, found it going on, and waits on its signal."""
    await wait_until_async(
        lambda: all(str(run.pk) in looked for run in runs),
        what="the wait to have read the run and to wait on its signal",
    )


async def produce(run, count: int, delivered: list[dict[str, Any]]) -> list[int]:
    """Publish `count` progress events, each once the stream has delivered the last, then the end.

    In step with the stream, so that it must deliver every event while the run
    goes on, not all at once when it has ended.
    """
    seqs = []
    for n in range(count):
        seqs.append(await publish(run, event_make("tool.progress", percent=n)))
        await wait_until_async(lambda n=n: len(delivered) > n, what=f"event {n} to be delivered")
    seqs.append(await publish(run, event_make("run.completed")))
    return seqs


async def follow(run, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every event of the run into `events`, as a stream that ends with the run delivers them."""
    async with asyncio.timeout(20):
        async for envelope in event_stream(
            conversation_id=run.conversation_id, run_id=run.pk, until_run_ends=True
        ):
            events.append(envelope)
    return events


async def test_a_layer_that_cannot_be_read_still_gets_every_event_from_the_database(user, settings):
    use_layer(settings, "tests.chat.live.test_streams.LayerThatCannotReceive")
    run = await make_run(user)
    events: list[dict[str, Any]] = []
    producer = asyncio.create_task(produce(run, 5, events))
    await follow(run, events)
    seqs = await producer
    assert [e["seq"] for e in events] == seqs == [1, 2, 3, 4, 5, 6]
    assert [e["type"] for e in events] == ["tool.progress"] * 5 + ["run.completed"]


async def test_a_redis_that_is_gone_still_gets_every_event_from_the_database(user, settings):
    # A real channels_redis layer pointed at a port nothing listens on: like a
    # Redis that was killed. Subscribing, publishing and reading all fail.
    use_layer(
        settings,
        "chat.live.redis_layer.RedisChannelLayer",
        hosts=[{"address": f"redis://127.0.0.1:{free_port()}/0", "socket_connect_timeout": 1}],
    )
    run = await make_run(user)
    events: list[dict[str, Any]] = []
    producer = asyncio.create_task(produce(run, 3, events))
    await follow(run, events)
    seqs = await producer
    assert [e["seq"] for e in events] == seqs == [1, 2, 3, 4]


@database_sync_to_async
def end_without_event(run) -> None:
    """The run ends, and its terminal event never reaches the layer (a dropped message)."""
    from chat.models import Run, RunStatus

    Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED)


async def test_a_wait_whose_end_event_was_dropped_ends_from_the_database_without_hanging(
    user, settings
):
    settings.TOOLCHAT_TASKS_IN_PROCESS = False  # the run ends elsewhere: the layer tells
    use_layer(settings, "tests.chat.live.test_streams.LayerWhoseReceiveOutlivesCancel")
    run = await make_run(user)
    waiting = asyncio.create_task(run_end_wait(run=run, timeout=30))
    await publish(run, event_make("tool.progress"))  # the wait is receiving
    await end_without_event(run)
    # The wait sees the end at its next look at the database, and returns: it
    # does not wait for a receive that would only end with a message.
    await asyncio.wait({waiting}, timeout=10)
    assert waiting.done(), "the wait did not return"
    assert waiting.result() is True


@database_sync_to_async
def end_with_event(run) -> None:
    """The run ends as the engine ends it: its status and its terminal event in one commit."""
    from django.db import transaction

    from chat.models import Run, RunStatus

    with transaction.atomic():
        Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED)
        event_publish(run=run, event=event_make("run.completed"))


async def test_a_wait_in_the_process_that_runs_the_turn_wakes_at_the_ends_commit(
    user, settings, monkeypatch
):
    # No layer and no poll that could wake it in time: only the end's commit can.
    settings.TOOLCHAT_TASKS_IN_PROCESS = True
    use_layer(settings, "tests.chat.live.test_streams.LayerThatCannotReceive")
    monkeypatch.setattr("chat.live.streams.CATCH_UP_S", 30)
    looked = looks_recorded(monkeypatch)
    run = await make_run(user)
    waiting = asyncio.create_task(run_end_wait(run=run, timeout=60))
    await looked_at(looked, run)
    await end_with_event(run)
    await asyncio.wait({waiting}, timeout=5)
    assert waiting.done(), "the end's commit did not wake the wait"
    assert waiting.result() is True


@database_sync_to_async
def pause_with_event(run) -> None:
    """The run stops for a person, as the engine stops it: status and event in one commit."""
    from django.db import transaction

    from chat.models import Run, RunStatus

    with transaction.atomic():
        Run.objects.filter(pk=run.pk).update(status=RunStatus.AWAITING_APPROVAL)
        event_publish(run=run, event=event_make("tool_call.approval_requested"))


async def test_a_wait_wakes_when_the_run_stops_for_a_persons_decision(user, settings, monkeypatch):
    # Nothing moves until someone decides, and the one waiting may be that someone.
    settings.TOOLCHAT_TASKS_IN_PROCESS = True
    use_layer(settings, "tests.chat.live.test_streams.LayerThatCannotReceive")
    monkeypatch.setattr("chat.live.streams.CATCH_UP_S", 30)
    looked = looks_recorded(monkeypatch)
    run = await make_run(user)
    waiting = asyncio.create_task(run_end_wait(run=run, timeout=60))
    await looked_at(looked, run)
    await pause_with_event(run)
    await asyncio.wait({waiting}, timeout=5)
    assert waiting.done(), "the pause did not wake the wait"
    assert waiting.result() is True
    # A run already waiting for a decision answers the wait at once.
    assert await run_end_wait(run=run, timeout=0.5) is True


async def ended_unannounced_is_seen(user, monkeypatch) -> bool:
    """A wait on a run that ends with no word to this process: whether the database told it."""
    looked = looks_recorded(monkeypatch)
    run = await make_run(user)
    waiting = asyncio.create_task(run_end_wait(run=run, timeout=60))
    await looked_at(looked, run)  # so that only a second look can find the end
    await end_without_event(run)
    await asyncio.wait({waiting}, timeout=10)
    assert waiting.done(), "the wait did not look at the database again"
    return waiting.result()


async def test_a_wait_in_process_still_sees_an_end_that_sent_no_signal(user, settings, monkeypatch):
    # Ended by another process (recover_runs, a worker): the database tells.
    settings.TOOLCHAT_TASKS_IN_PROCESS = True
    assert await ended_unannounced_is_seen(user, monkeypatch)


async def test_a_wait_in_process_gives_up_at_its_timeout(user, settings):
    settings.TOOLCHAT_TASKS_IN_PROCESS = True
    run = await make_run(user)
    assert await run_end_wait(run=run, timeout=0.5) is False


async def test_a_stream_closed_while_receiving_does_not_wait_for_the_receive(user, settings):
    use_layer(settings, "tests.chat.live.test_streams.LayerWhoseReceiveOutlivesCancel")
    run = await make_run(user)
    events: list[dict[str, Any]] = []
    stream = event_stream(conversation_id=run.conversation_id, run_id=run.pk)
    await publish(run, event_make("tool.progress"))
    events.append(await anext(stream))
    reading = asyncio.ensure_future(anext(stream))  # now waiting on the layer
    await asyncio.sleep(0)
    reading.cancel()  # the client went away
    await asyncio.wait({reading}, timeout=10)
    assert reading.done(), "closing the stream waited on its receive"
    assert reading.cancelled()
    assert [e["type"] for e in events] == ["tool.progress"]


class LayerThatDropsTheEnd(ThreadSafeInMemoryChannelLayer):
    """Delivers every event but a run's end: a message dropped, with nothing after it."""

    def group_send_soon(self, group: str, message: dict[str, Any]) -> int:
        if (message.get("event") or {}).get("type") == "run.completed":
            return 0
        return super().group_send_soon(group, message)


async def test_an_idle_stream_leaves_the_database_alone_and_a_quiet_one_catches_up(
    user, settings, monkeypatch
):
    """A socket opened on a page reads the stored events once, then waits for live ones:
    before, it read the database again after 1, 3 and 7 s, so that a hundred sockets
    opened at once read it a hundred times a second while their users posted. Once live
    events have come, a quiet spell still sends it to the database, which catches a
    dropped end within CATCH_UP_S."""
    use_layer(settings, "tests.chat.live.test_streams.LayerThatDropsTheEnd")
    monkeypatch.setattr("chat.live.streams.MAX_CATCH_UP_S", 30)
    reads = []
    real_stored_events = stored_events

    def counted(**kwargs: Any) -> Any:
        reads.append(kwargs["after"])
        return real_stored_events(**kwargs)

    monkeypatch.setattr("chat.live.streams.stored_events", counted)
    run = await make_run(user)
    events: list[dict[str, Any]] = []
    following = asyncio.create_task(follow(run, events))
    await asyncio.sleep(1.5)  # idle: CATCH_UP_S is 0.2 s here
    assert reads == [0], "an idle stream read the database again"
    await publish(run, event_make("tool.progress"))
    await publish(run, event_make("run.completed"))  # dropped by the layer
    async with asyncio.timeout(5):
        await following
    assert [e["type"] for e in events] == ["tool.progress", "run.completed"]
    assert reads == [0, 1]


async def worker_publishes_end(redis_url: str, *runs: Any) -> None:
    """A worker's layer (another process's) tells of the runs' ends, from a thread without a loop."""
    from chat.live.redis_layer import RedisChannelLayer

    worker = RedisChannelLayer(hosts=[{"address": redis_url}])
    await asyncio.to_thread(worker.group_send_now, [], ended_runs=[str(r.pk) for r in runs])


async def woken_by_the_workers_end(redis_url: str, run: Any, waiting: asyncio.Task[Any]) -> bool:
    """The run ends in a worker, which publishes it: whether the wait woke, told of the end."""
    await end_without_event(run)
    await worker_publishes_end(redis_url, run)
    await asyncio.wait({waiting}, timeout=5)
    return waiting.done() and waiting.result() is True


@pytest.fixture
def waits_on_redis(settings, monkeypatch, redis_url):
    """This process a web process on Redis, whose runs end in workers; no poll in time."""
    settings.TOOLCHAT_TASKS_IN_PROCESS = False
    use_layer(settings, "chat.live.redis_layer.RedisChannelLayer", hosts=[{"address": redis_url}])
    monkeypatch.setattr("chat.live.streams.CATCH_UP_S", 30)


@pytest.mark.redis
async def test_a_wait_on_redis_wakes_at_the_workers_publish_of_the_end(
    user, waits_on_redis, redis_url, monkeypatch
):
    # The run ends in a worker: nothing in this process is told but by Redis.
    looked = looks_recorded(monkeypatch)
    run = await make_run(user)
    waiting = asyncio.create_task(run_end_wait(run=run, timeout=60))
    await wait_until_async(subscribed, what="the subscription to run ends")
    await looked_at(looked, run)
    assert await woken_by_the_workers_end(redis_url, run, waiting), "the publish did not wake it"


@pytest.mark.redis
async def test_several_waits_on_redis_each_wake_at_their_own_runs_end(
    user, waits_on_redis, redis_url, monkeypatch
):
    looked = looks_recorded(monkeypatch)
    runs = [await make_run(user) for _ in range(3)]
    waits = [asyncio.create_task(run_end_wait(run=run, timeout=60)) for run in runs]
    await wait_until_async(subscribed, what="the subscription to run ends")
    await looked_at(looked, *runs)
    await end_without_event(runs[1])
    await worker_publishes_end(redis_url, runs[1])
    await asyncio.wait({waits[1]}, timeout=5)
    assert waits[1].done()
    assert waits[1].result() is True
    assert not waits[0].done()  # not woken by another run's end
    assert not waits[2].done()
    for run in (runs[0], runs[2]):
        await end_without_event(run)
    await worker_publishes_end(redis_url, runs[0], runs[2])
    await asyncio.wait({waits[0], waits[2]}, timeout=5)
    assert [w.result() for w in waits] == [True, True, True]


class SilencingRelay:
    """A TCP relay to Redis whose open connections can go silent: kept open, nothing passed.

    What a NAT or a proxy that dropped a connection's state does, or a Redis
    host that hung: no error, no close, no answer. Connections opened after
    `silence` are relayed again.
    """

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("redis://").split("/")[0].split(":")
        self.target = (host, int(port))
        self.silenced: list[asyncio.StreamWriter] = []
        self.open: list[asyncio.StreamWriter] = []
        self.relays: list[asyncio.Task[None]] = []
        self.connections = 0

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._accepted, "127.0.0.1", 0)
        return f"redis://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/0"

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        for writer in self.open:
            writer.close()
        for relay in self.relays:
            relay.cancel()
        await asyncio.gather(*self.relays, return_exceptions=True)

    def silence(self) -> None:
        self.silenced.extend(self.open)

    def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.relays.append(asyncio.create_task(self._relay(reader, writer)))

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self.open += [writer, up_writer]

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while data := await source.read(65536):
                if sink not in self.silenced:
                    sink.write(data)
                    await sink.drain()
            sink.close()  # one side closed: so does the other

        with contextlib.suppress(ConnectionError):
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


def subscribed() -> bool:
    """Whether this loop's subscription to run ends is up."""
    from chat.live.subscription import _subscriptions as _listeners

    listener = _listeners.get(asyncio.get_running_loop())
    return listener is not None and listener.subscribed.is_set()


def pings_soon(monkeypatch, settings, *, pong_wait_s: float) -> None:
    """A web process on Redis whose subscription PINGs after 0.3 s of quiet; no poll in time."""
    monkeypatch.setattr("chat.live.subscription.KEEPALIVE_S", 0.3)
    monkeypatch.setattr("chat.live.subscription.PONG_WAIT_S", pong_wait_s)
    monkeypatch.setattr("chat.live.subscription.LISTEN_RETRY_S", 0.1)
    monkeypatch.setattr("chat.live.streams.CATCH_UP_S", 30)
    settings.TOOLCHAT_TASKS_IN_PROCESS = False


@pytest.mark.redis
async def test_a_subscription_gone_silent_is_found_by_its_ping_and_opened_again(
    user, settings, monkeypatch, redis_url, caplog
):
    # The subscription's connection stops passing anything, with no error: only an
    # unanswered PING shows it. Without one, every later end went unheard.
    pings_soon(monkeypatch, settings, pong_wait_s=1.0)
    relay = SilencingRelay(redis_url)
    async with relay as relayed:
        use_layer(settings, "chat.live.redis_layer.RedisChannelLayer", hosts=[{"address": relayed}])
        run = await make_run(user)
        waiting = asyncio.create_task(run_end_wait(run=run, timeout=60))
        await wait_until_async(subscribed, timeout=5)
        await asyncio.sleep(1.0)  # quiet for three PINGs, each answered
        assert relay.connections == 1
        assert "no answer" not in caplog.text
        relay.silence()
        await wait_until_async(lambda: relay.connections == 2, timeout=10)
        assert "the subscription to run ends failed" in caplog.text
        await wait_until_async(subscribed, timeout=5)
        assert await woken_by_the_workers_end(redis_url, run, waiting), "not heard once reopened"


@pytest.mark.redis
async def test_a_subscription_with_redis_health_checks_stays_up_while_quiet(
    user, settings, monkeypatch, redis_url, caplog
):
    # redis-py answers its own health checks' pongs and returns no message for them:
    # that is not the PING's answer, and not a reason to open the subscription again.
    pings_soon(monkeypatch, settings, pong_wait_s=0.3)
    checked = {"address": redis_url, "health_check_interval": 0.05}  # as REDIS_URL's ?…=1 does
    use_layer(settings, "chat.live.redis_layer.RedisChannelLayer", hosts=[checked])
    run = await make_run(user)
    waiting = asyncio.create_task(run_end_wait(run=run, timeout=60))
    await wait_until_async(subscribed, timeout=5)
    await asyncio.sleep(2.0)  # six PINGs, and health checks between them
    assert "the subscription to run ends failed" not in caplog.text
    assert await woken_by_the_workers_end(redis_url, run, waiting)


async def test_a_wait_whose_subscription_cannot_connect_reads_the_database(
    user, settings, caplog, monkeypatch
):
    settings.TOOLCHAT_TASKS_IN_PROCESS = False
    use_layer(
        settings,
        "chat.live.redis_layer.RedisChannelLayer",
        hosts=[{"address": f"redis://127.0.0.1:{free_port()}/0", "socket_connect_timeout": 1}],
    )
    assert await ended_unannounced_is_seen(user, monkeypatch)
    assert "the subscription to run ends failed" in caplog.text
