"""`group_send_now` on a real Redis: what channels_redis' receivers read, in order.

The sending layer is a worker's, sending from a task thread (no event loop);
the receiving layers are web processes',
each with its own process-local channels (one BZPOPMIN key per process). One
receiver runs channels_redis' own class: the messages are stored as it
stores them.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from typing import Any

import pytest
from channels_redis.core import RedisChannelLayer as UpstreamLayer
from django.core.exceptions import ImproperlyConfigured

from chat.live import sender
from chat.live.redis_layer import SEND_TIMEOUT_S, RedisChannelLayer
from chat.live.sender import layer_send

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


@pytest.fixture
async def layers(redis_url):
    made: list[Any] = []

    def make(cls: type = RedisChannelLayer, **config: Any) -> Any:
        layer = cls(hosts=[{"address": redis_url}], **config)
        made.append(layer)
        return layer

    yield make
    await made[0].flush()
    for layer in made:
        await layer.close_pools()


async def sent(layer: Any, messages: list[tuple[str, dict[str, Any]]]) -> int:
    """`group_send_now` from a thread without a loop, as a committing task thread calls it."""
    return await asyncio.to_thread(layer.group_send_now, messages)


async def received(layer: Any, channel: str, count: int) -> list[dict[str, Any]]:
    return [await asyncio.wait_for(layer.receive(channel), 5) for _ in range(count)]


async def nothing_more(layer: Any, channel: str) -> bool:
    try:
        await asyncio.wait_for(layer.receive(channel), 0.3)
    except TimeoutError:
        return True
    return False


async def test_each_group_s_channels_get_its_messages_in_the_order_sent(layers):
    worker, web_one, web_two = layers(), layers(), layers(UpstreamLayer)
    # Two sockets of one process and one of another on conversation.a; one on .b.
    a_first, a_second = await web_one.new_channel(), await web_one.new_channel()
    a_other, b_only = await web_two.new_channel(), await web_two.new_channel()
    for group, channel in [("conversation.a", a_first), ("conversation.a", a_second)]:
        await web_one.group_add(group, channel)
    await web_two.group_add("conversation.a", a_other)
    await web_two.group_add("conversation.b", b_only)

    messages = [
        (f"conversation.{'ab'[n % 3 == 0]}", {"type": "run.event", "n": n, "text": "é\u0000"})
        for n in range(30)
    ]
    # In two calls within the same second, as two commits of a step would be.
    assert await sent(worker, messages[:12]) == 0
    assert await sent(worker, messages[12:]) == 0

    to_a = [message for group, message in messages if group == "conversation.a"]
    to_b = [message for group, message in messages if group == "conversation.b"]
    assert await received(web_one, a_first, len(to_a)) == to_a
    assert await received(web_one, a_second, len(to_a)) == to_a
    assert await received(web_two, a_other, len(to_a)) == to_a
    assert await received(web_two, b_only, len(to_b)) == to_b
    for layer, channel in [(web_one, a_first), (web_two, b_only)]:
        assert await nothing_more(layer, channel)


async def test_a_full_channel_drops_what_is_over_its_capacity_and_says_how_many(layers):
    worker, web = layers(capacity=3), layers(capacity=3)
    channel = await web.new_channel()
    general = "conversation-reader"  # a channel that is not process-local
    await web.group_add("conversation.a", channel)
    await web.group_add("conversation.a", general)

    dropped = await sent(worker, [("conversation.a", {"n": n}) for n in range(5)])

    # The process's key takes three messages, the general channel's three.
    assert dropped == 4
    assert [message["n"] for message in await received(web, channel, 3)] == [0, 1, 2]
    assert [message["n"] for message in await received(web, general, 3)] == [0, 1, 2]
    assert await nothing_more(web, channel)


async def test_a_group_with_no_members_and_an_empty_list_send_nothing(layers):
    worker, web = layers(), layers()
    channel = await web.new_channel()
    await web.group_add("conversation.a", channel)
    assert await sent(worker, []) == 0
    assert await sent(worker, [("conversation.nobody", {"n": 1})]) == 0
    assert await nothing_more(web, channel)


async def test_a_channel_that_left_its_group_gets_nothing_more(layers):
    worker, web = layers(), layers()
    staying, leaving = await web.new_channel(), await web.new_channel()
    await web.group_add("conversation.a", staying)
    await web.group_add("conversation.a", leaving)
    await sent(worker, [("conversation.a", {"n": 1})])
    await web.group_discard("conversation.a", leaving)
    await sent(worker, [("conversation.a", {"n": 2})])

    assert [message["n"] for message in await received(web, staying, 2)] == [1, 2]
    assert [message["n"] for message in await received(web, leaving, 1)] == [1]
    assert await nothing_more(web, leaving)


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


async def test_a_host_given_as_host_and_port_is_sent_to(redis_url):
    host, port = redis_url.removeprefix("redis://").split("/")[0].split(":")
    worker = RedisChannelLayer(hosts=[(host, int(port))])
    web = RedisChannelLayer(hosts=[redis_url])
    channel = await web.new_channel()
    await web.group_add("conversation.t", channel)
    assert await sent(worker, [("conversation.t", {"n": 1})]) == 0
    assert (await received(web, channel, 1))[0]["n"] == 1
    await web.flush()
    await web.close_pools()


async def test_threads_sending_at_once_lose_nothing_and_keep_each_one_s_order(layers):
    worker, web = layers(capacity=1000), layers(capacity=1000)
    channel = await web.new_channel()
    await web.group_add("conversation.a", channel)

    def commits(thread: int) -> None:
        for n in range(20):
            worker.group_send_now([("conversation.a", {"thread": thread, "n": n})])

    await asyncio.gather(*(asyncio.to_thread(commits, thread) for thread in range(8)))
    got = await received(web, channel, 160)
    for thread in range(8):
        assert [m["n"] for m in got if m["thread"] == thread] == list(range(20))
    assert await nothing_more(web, channel)
