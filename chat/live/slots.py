"""How many sockets a user has open, counted where every web process sees it.

With REDIS_URL set, each user has a sorted set in Redis: one member per open
socket, scored with the time it lapses. A socket takes its slot when it
opens (a Lua script, so two processes cannot both take the last one),
renews it at each of its pings, and gives it back when it closes. A web
process that dies cannot give its slots back; they lapse after
SLOT_LAPSE_PINGS ping intervals. Without Redis there is one web process,
and a dictionary in its memory counts.

When Redis cannot be reached, a socket is let in (and the failure logged):
the cap guards against runaway clients, and a Redis outage must not lock
every user out of live events, which fall back to the database.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import defaultdict
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)

# A slot that is not renewed for this many ping intervals has lapsed.
SLOT_LAPSE_PINGS = 3
KEY = "toolchat:ws-slots:{user_id}"

# ARGV: now, lapses_at, limit, socket id, key ttl (s). 1 if the slot was taken.
_TAKE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""

_memory: defaultdict[int, set[str]] = defaultdict(set)
# One client per event loop: a redis.asyncio pool belongs to the loop that made it.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


def _lapse_s() -> float:
    return settings.TOOLCHAT_WS_PING_S * SLOT_LAPSE_PINGS


def _client() -> Any:
    import redis.asyncio

    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = redis.asyncio.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2
        )
    return client


async def slot_take(user_id: int, socket_id: str) -> bool:
    """Take one of the user's socket slots; False when all are in use."""
    limit = settings.TOOLCHAT_WS_MAX_SOCKETS_PER_USER
    if not settings.REDIS_URL:
        if len(_memory[user_id]) >= limit:
            return False
        _memory[user_id].add(socket_id)
        return True
    now = time.time()
    try:
        taken = await _client().eval(
            _TAKE,
            1,
            KEY.format(user_id=user_id),
            now,
            now + _lapse_s(),
            limit,
            socket_id,
            int(_lapse_s()) + 1,
        )
    except Exception as exc:
        logger.warning("socket slots: Redis unreachable, socket let in: %s", exc)
        return True
    return bool(taken)


async def slot_renew(user_id: int, socket_id: str) -> None:
    """Keep the socket's slot from lapsing (called at each ping)."""
    if not settings.REDIS_URL:
        return
    key = KEY.format(user_id=user_id)
    try:
        client = _client()
        await client.zadd(key, {socket_id: time.time() + _lapse_s()}, xx=True)
        await client.expire(key, int(_lapse_s()) + 1)
    except Exception as exc:
        logger.warning("socket slots: renewal failed: %s", exc)


async def slot_give_back(user_id: int, socket_id: str) -> None:
    """Free the socket's slot."""
    if not settings.REDIS_URL:
        _memory[user_id].discard(socket_id)
        if not _memory[user_id]:
            del _memory[user_id]
        return
    try:
        await _client().zrem(KEY.format(user_id=user_id), socket_id)
    except Exception as exc:
        logger.warning("socket slots: could not free a slot (it lapses by itself): %s", exc)


def slots_in_memory() -> dict[int, int]:
    """Open sockets per user in this process's count (without Redis), for tests and checks."""
    return {user_id: len(ids) for user_id, ids in _memory.items()}
