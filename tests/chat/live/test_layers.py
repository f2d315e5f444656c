"""The channel layer as production configures it: channels_redis on a real Redis.

channels_redis waits for messages with a blocking pop (BZPOPMIN) of
`RedisChannelLayer.brpop_timeout` seconds; redis-py 8 gives up on a read
after 5 s by default. The settings must give the layer's connections a read
timeout above the pop, or every idle receive ends in redis' TimeoutError.
"""

from __future__ import annotations

import asyncio
import runpy
from pathlib import Path

import pytest
from channels_redis.core import RedisChannelLayer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

BASE_SETTINGS = Path(__file__).resolve().parents[3] / "project" / "settings" / "base.py"


@pytest.fixture
def redis_layer_config(redis_url, monkeypatch):
    """CHANNEL_LAYERS["default"] as project/settings/base.py builds it with REDIS_URL set."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    values = runpy.run_path(str(BASE_SETTINGS))
    config = values["CHANNEL_LAYERS"]["default"]
    assert config["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    return config["CONFIG"]


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
