"""The channel layers: the embedded default's in-memory one, and channels_redis on a real Redis.

The in-memory layer takes sends from threads with no loop (the committing
task threads) and hands each to the loop that receives. channels_redis waits for messages with a blocking pop (BZPOPMIN) of
`RedisChannelLayer.brpop_timeout` seconds; redis-py 8 gives up on a read
after 5 s by default. The settings must give the layer's connections a read
timeout above the pop, or every idle receive ends in redis' TimeoutError.
"""

from __future__ import annotations

import asyncio
import runpy
import threading
from pathlib import Path

import pytest
from channels_redis.core import RedisChannelLayer

from chat.live.layers import ThreadSafeInMemoryChannelLayer

pytestmark = [pytest.mark.anyio]

BASE_SETTINGS = Path(__file__).resolve().parents[3] / "project" / "settings" / "base.py"


async def test_a_thread_sends_to_a_group_in_order_and_wakes_its_receiver():
    layer = ThreadSafeInMemoryChannelLayer()
    waiting, late = await layer.new_channel(), await layer.new_channel()
    await layer.group_add("conversation.1", waiting)
    await layer.group_add("conversation.1", late)
    receiving = asyncio.ensure_future(layer.receive(waiting))
    await asyncio.sleep(0)  # receiving: the layer knows its loop

    def send() -> None:
        for number in range(50):
            layer.group_send_soon("conversation.1", {"type": "run.event", "n": number})

    thread = threading.Thread(target=send)
    thread.start()
    thread.join()
    got = [await asyncio.wait_for(receiving, 2)]
    got += [await asyncio.wait_for(layer.receive(waiting), 2) for _ in range(49)]
    assert [message["n"] for message in got] == list(range(50))
    # A channel that had not received yet finds them queued, in order, too.
    assert (await asyncio.wait_for(layer.receive(late), 2))["n"] == 0


@pytest.fixture
def redis_layer_config(redis_url, monkeypatch):
    """CHANNEL_LAYERS["default"] as project/settings/base.py builds it with REDIS_URL set."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    values = runpy.run_path(str(BASE_SETTINGS))
    config = values["CHANNEL_LAYERS"]["default"]
    assert config["BACKEND"] == "chat.live.redis_layer.RedisChannelLayer"
    return config["CONFIG"]


@pytest.mark.redis
async def test_an_idle_receive_outlasts_the_blocking_pop_and_gets_a_late_message(
    redis_layer_config,
):
    layer = RedisChannelLayer(**redis_layer_config)
    channel = await layer.new_channel()

    async def send_late() -> None:
        await asyncio.sleep(RedisChannelLayer.brpop_timeout + 2)
        await layer.send(channel, {"type": "late"})

    sender = asyncio.create_task(send_late())
    # Idle for longer than one blocking pop: the read must not time out first.
    message = await asyncio.wait_for(layer.receive(channel), RedisChannelLayer.brpop_timeout + 10)
    await sender
    assert message == {"type": "late"}
    await layer.flush()
