"""The shared cache (Redis in production): one pool of connections per process."""

from __future__ import annotations

import asyncio

import pytest
import redis
from asgiref.sync import sync_to_async

from chat.message_rate import message_rate_check
from tests.factories import UserFactory


def _connections_made(url: str) -> int:
    return int(redis.Redis.from_url(url).info("stats")["total_connections_received"])


@pytest.mark.django_db(transaction=True)
def test_requests_in_their_own_async_contexts_share_the_processes_redis_connections(
    redis_url, settings
):
    """Django makes a cache object per request (per async context): each used to open a
    pool and a connection of its own, so every post paid a Redis connect and its handshake,
    and a busy process left hundreds of connections behind (Django ticket #35651)."""
    settings.CACHES = {
        "default": {
            "BACKEND": "project.cache.RedisCache",
            "LOCATION": redis_url,
            "KEY_PREFIX": "cache-test",
        }
    }
    users = [UserFactory() for _ in range(40)]

    async def post_all() -> None:
        # Each call runs in a context of its own, as each ASGI request and socket does.
        check = sync_to_async(message_rate_check, thread_sensitive=False)
        await asyncio.gather(*(check(user) for user in users))

    before = _connections_made(redis_url)
    asyncio.run(post_all())
    made = _connections_made(redis_url) - before
    # At most one per thread that asked at once (asgiref's pool), never one per request.
    assert made <= 12, f"{made} Redis connections for {len(users)} rate checks"
    counted = redis.Redis.from_url(redis_url).zcard(
        f"cache-test:1:rate:throttle_messages_{users[0].pk}"
    )
    assert counted == 1
