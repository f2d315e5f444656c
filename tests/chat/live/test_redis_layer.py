"""`group_send_now` on a real Redis: what the web processes' subscriptions hear, in order.

The sending layer is a worker's, sending from a task thread (no event loop);
each receiving side is a web process's one subscription
(chat/live/subscription.py), which hands a group's messages to the queues of
the streams that follow it.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from chat.live import sender
from chat.live.redis_layer import SEND_TIMEOUT_S, RedisChannelLayer
from chat.live.sender import layer_send
from chat.live.subscription import FAILED, Subscription
from tests.assertions import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


@pytest.fixture
async def layers(redis_url):
    made: list[Any] = []

    def make(**config: Any) -> Any:
        layer = RedisChannelLayer(hosts=[{"address": redis_url}], **config)
        made.append(layer)
        return layer

    yield make
    for layer in made:
        await layer.close_pools()


@pytest.fixture
async def web(layers):
    """A web process's subscription (each call another process's)."""
    made: list[Subscription] = []

    async def make(**config: Any) -> Subscription:
        hub = Subscription(layers(**config))
        made.append(hub)
        await asyncio.wait_for(hub.subscribed.wait(), 5)
        return hub

    yield make
    for hub in made:
        hub.task.cancel()
    await asyncio.gather(*(hub.task for hub in made), return_exceptions=True)


async def followed(hub: Subscription, group: str, capacity: int = 100) -> asyncio.Queue[Any]:
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=capacity)
    await hub.join(group, queue)
    return queue


async def sent(layer: Any, messages: list[tuple[str, dict[str, Any]]]) -> None:
    """`group_send_now` from a thread without a loop, as a committing task thread calls it."""
    await asyncio.to_thread(layer.group_send_now, messages)


async def received(queue: asyncio.Queue[Any], count: int) -> list[dict[str, Any]]:
    return [await asyncio.wait_for(queue.get(), 5) for _ in range(count)]


async def nothing_more(queue: asyncio.Queue[Any]) -> bool:
    try:
        await asyncio.wait_for(queue.get(), 0.3)
    except TimeoutError:
        return True
    return False


async def test_each_group_s_followers_get_its_messages_in_the_order_sent(layers, web):
    worker, web_one, web_two = layers(), await web(), await web()
    # Two streams of one process and one of another on conversation.a; one on .b.
    a_first = await followed(web_one, "conversation.a")
    a_second = await followed(web_one, "conversation.a")
    a_other = await followed(web_two, "conversation.a")
    b_only = await followed(web_two, "conversation.b")

    messages = [
        (f"conversation.{'ab'[n % 3 == 0]}", {"type": "run.event", "n": n, "text": "é\u0000"})
        for n in range(30)
    ]
    # In two calls within the same second, as two commits of a step would be.
    await sent(worker, messages[:12])
    await sent(worker, messages[12:])

    to_a = [message for group, message in messages if group == "conversation.a"]
    to_b = [message for group, message in messages if group == "conversation.b"]
    assert await received(a_first, len(to_a)) == to_a
    assert await received(a_second, len(to_a)) == to_a
    assert await received(a_other, len(to_a)) == to_a
    assert await received(b_only, len(to_b)) == to_b
    for queue in (a_first, b_only):
        assert await nothing_more(queue)


async def test_a_process_subscribes_to_a_group_once_however_many_follow_it(layers, web, redis_url):
    import redis.asyncio

    hub = await web()
    client = redis.asyncio.Redis.from_url(redis_url)
    channel = hub.layer.group_channel("conversation.a")
    queues = [await followed(hub, "conversation.a") for _ in range(5)]
    assert await client.pubsub_numsub(channel) == [(channel.encode(), 1)]
    for queue in queues[:4]:
        hub.leave("conversation.a", queue)
    assert await client.pubsub_numsub(channel) == [(channel.encode(), 1)]
    hub.leave("conversation.a", queues[4])

    async def unsubscribed() -> bool:
        return await client.pubsub_numsub(channel) == [(channel.encode(), 0)]

    # The UNSUBSCRIBE is sent, not waited for.
    await wait_until_async(unsubscribed, timeout=5, what="the last stream's UNSUBSCRIBE")
    await client.aclose()


async def test_a_full_queue_drops_what_is_over_its_capacity(layers, web):
    worker, hub = layers(), await web()
    small = await followed(hub, "conversation.a", capacity=3)
    roomy = await followed(hub, "conversation.a")

    await sent(worker, [("conversation.a", {"n": n}) for n in range(5)])

    assert [message["n"] for message in await received(roomy, 5)] == [0, 1, 2, 3, 4]
    assert [message["n"] for message in await received(small, 3)] == [0, 1, 2]
    assert await nothing_more(small)


async def test_a_group_nobody_follows_and_an_empty_list_send_nothing(layers, web):
    worker, hub = layers(), await web()
    queue = await followed(hub, "conversation.a")
    await sent(worker, [])
    await sent(worker, [("conversation.nobody", {"n": 1})])
    assert await nothing_more(queue)


async def test_a_stream_that_left_its_group_gets_nothing_more(layers, web):
    worker, hub = layers(), await web()
    staying = await followed(hub, "conversation.a")
    leaving = await followed(hub, "conversation.a")
    await sent(worker, [("conversation.a", {"n": 1})])
    await asyncio.wait_for(leaving.get(), 5)
    hub.leave("conversation.a", leaving)
    await sent(worker, [("conversation.a", {"n": 2})])

    assert [message["n"] for message in await received(staying, 2)] == [1, 2]
    assert await nothing_more(leaving)


async def test_a_group_followed_again_after_everyone_left_is_heard_again(layers, web):
    worker, hub = layers(), await web()
    for n in range(3):
        queue = await followed(hub, "conversation.a")
        await sent(worker, [("conversation.a", {"n": n})])
        assert [message["n"] for message in await received(queue, 1)] == [n]
        hub.leave("conversation.a", queue)


async def test_a_lost_connection_tells_every_follower(layers, web, redis_url):
    import redis.asyncio

    hub = await web()
    queue = await followed(hub, "conversation.a")
    client = redis.asyncio.Redis.from_url(redis_url)
    await client.client_kill_filter(_type="pubsub")
    await client.aclose()
    assert await asyncio.wait_for(queue.get(), 5) is FAILED
    await asyncio.wait_for(hub.subscribed.wait(), 5)  # opened again
    again = await followed(hub, "conversation.a")
    await sent(layers(), [("conversation.a", {"n": 1})])
    assert [message["n"] for message in await received(again, 1)] == [1]


def test_a_sentinel_setup_is_told_to_use_channels_redis_own_layer():
    with pytest.raises(
        ImproperlyConfigured, match=re.escape("channels_redis.core.RedisChannelLayer")
    ):
        RedisChannelLayer(hosts=[{"master_name": "main", "sentinels": [("127.0.0.1", 26379)]}])


def test_a_redis_that_does_not_answer_holds_a_commit_s_send_for_a_second_at_most(
    caplog, monkeypatch
):
    monkeypatch.setattr(sender, "_now_skipped_until", 0.0)
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        port = silent.getsockname()[1]
        # A read timeout in the address, as REDIS_URL may carry: the send's own still holds.
        address = f"redis://127.0.0.1:{port}/0?socket_timeout=30"
        layer = RedisChannelLayer(hosts=[{"address": address}])
        started = time.monotonic()
        layer_send(layer, [("conversation.a", {"event": {"type": "run.started", "seq": 1}})])
        waited = time.monotonic() - started
    assert waited < SEND_TIMEOUT_S + 0.5
    assert "could not send events run.started #1" in caplog.text


async def test_a_host_given_as_host_and_port_is_sent_to(redis_url, web):
    host, port = redis_url.removeprefix("redis://").split("/")[0].split(":")
    worker = RedisChannelLayer(hosts=[(host, int(port))])
    queue = await followed(await web(), "conversation.t")
    await sent(worker, [("conversation.t", {"n": 1})])
    assert (await received(queue, 1))[0]["n"] == 1


async def test_threads_sending_at_once_lose_nothing_and_keep_each_one_s_order(layers, web):
    worker = layers()
    channel = await followed(await web(), "conversation.a", capacity=1000)

    def commits(thread: int) -> None:
        for n in range(20):
            worker.group_send_now([("conversation.a", {"thread": thread, "n": n})])

    await asyncio.gather(*(asyncio.to_thread(commits, thread) for thread in range(8)))
    got = await received(channel, 160)
    for thread in range(8):
        assert [m["n"] for m in got if m["thread"] == thread] == list(range(20))
    assert await nothing_more(channel)


async def test_a_follower_whose_queue_is_full_is_still_told_of_a_lost_connection(
    layers, web, redis_url
):
    # A slow client's stream, its queue full, must still hear that the connection
    # went: else it keeps a queue nobody feeds and never follows again.
    import redis.asyncio

    worker, hub = layers(), await web()
    full = await followed(hub, "conversation.a", capacity=2)
    await sent(worker, [("conversation.a", {"n": n}) for n in range(2)])
    await wait_until_async(full.full, timeout=5, what="the queue filled")
    client = redis.asyncio.Redis.from_url(redis_url)
    await client.client_kill_filter(_type="pubsub")
    await client.aclose()
    await wait_until_async(lambda: FAILED in list(full._queue), timeout=5, what="FAILED put")  # type: ignore[attr-defined]


async def test_a_joiner_cancelled_while_it_subscribes_leaves_the_others_subscribed(layers, web):
    # The first to join is cancelled (its client went) while its SUBSCRIBE waits for
    # the UNSUBSCRIBE of one who left: the second, waiting on the same SUBSCRIBE,
    # is still subscribed and hears the group.
    worker, hub = layers(), await web()
    hub.leave("conversation.a", await followed(hub, "conversation.a"))  # an UNSUBSCRIBE on its way
    first_queue: asyncio.Queue[Any] = asyncio.Queue()
    second_queue: asyncio.Queue[Any] = asyncio.Queue()
    first = asyncio.create_task(hub.join("conversation.a", first_queue))
    second = asyncio.create_task(hub.join("conversation.a", second_queue))
    await asyncio.sleep(0)  # a yield: both joined, the first's SUBSCRIBE behind the UNSUBSCRIBE
    assert not first.done()
    first.cancel()
    await asyncio.wait_for(second, 5)  # raises if it timed out
    await sent(worker, [("conversation.a", {"n": 1})])
    assert [message["n"] for message in await received(second_queue, 1)] == [1]


async def test_a_subscription_is_forgotten_with_its_loop():
    import gc
    import weakref

    from chat.live.subscription import _subscriptions, subscription

    class Layer:  # never reached: the loop ends first
        def run_ends_channel(self) -> str:
            return "x"

        def subscription_client(self) -> Any:
            raise ConnectionError("not here")

    def one_loop() -> weakref.ref[Any]:
        loop = asyncio.new_event_loop()

        async def use() -> None:
            subscription(Layer())

        loop.run_until_complete(use())
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
        return weakref.ref(loop)

    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as thread:  # a thread with no loop running
        gone = thread.submit(one_loop).result()
    gc.collect()
    assert gone() is None
    assert gone not in [weakref.ref(loop) for loop in _subscriptions]
