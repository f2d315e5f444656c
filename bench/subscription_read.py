"""The CPU a web process spends reading the workers' publishes (chat/live/subscription.py).

A private Redis; in a child process of its own, one `Subscription` (the web
process's one per loop) follows N groups, each with one stream's queue; this
process publishes `--messages` run events (a `message.delta`'s envelope, as
`group_send_now` publishes it) spread over those groups, in pipelines of 8 as a
commit sends them, then the run-ends channel's ids. The child reports the CPU
time it took to read and hand on every message, per message. redis-py reads
with hiredis' parser when the `hiredis` package is installed, with its own
Python parser otherwise; the same run with and without it is the comparison:

    .venv/bin/python bench/subscription_read.py [--messages 20000] [--groups 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def envelope(seq: int) -> dict:
    return {
        "type": "run.event",
        "event": {
            "seq": seq,
            "type": "message.delta",
            "run_id": "0b7d1c3e-8a4f-4e0a-9d55-3f1c2b7a9e10",
            "conversation_id": "5e2a8c41-7d3b-4f6e-b1a9-0c8d2e4f6a13",
            "ts": "2026-12-02T14:00:00.000000+00:00",
            "data": {"message_id": "9f4e2d1c-3b5a-4c7e-8d9f-1a2b3c4d5e6f", "text": f"word{seq} "},
        },
    }


async def follow(url: str, groups: int, expected: int) -> None:
    """The child: one Subscription, a queue a group; CPU per message read, printed as JSON."""
    from chat.live.redis_layer import RedisChannelLayer
    from chat.live.subscription import subscription

    layer = RedisChannelLayer(hosts=[url])
    hub = subscription(layer)
    queues = [asyncio.Queue(maxsize=expected + 1) for _ in range(groups)]
    for index, queue in enumerate(queues):
        await hub.join(f"conversation-{index}", queue)
    print("ready", flush=True)
    started = time.process_time()
    wall = time.monotonic()
    while sum(queue.qsize() for queue in queues) < expected:
        await asyncio.sleep(0.01)
    cpu = time.process_time() - started
    print(json.dumps({"cpu_s": cpu, "wall_s": time.monotonic() - wall}), flush=True)


def main() -> None:
    if sys.argv[1:2] == ["--follow"]:
        asyncio.run(follow(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--groups", type=int, default=16)
    args = parser.parse_args()

    import redis
    import redis.utils

    from tests.plugins.services import RedisServer

    server = RedisServer()
    server.start()
    try:
        child = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--follow",
                server.url,
                str(args.groups),
                str(args.messages),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings.base"},
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        client = redis.Redis.from_url(server.url)
        from chat.live.redis_layer import RedisChannelLayer

        layer = RedisChannelLayer(hosts=[server.url])
        for start in range(0, args.messages, 8):
            batch = [
                (f"conversation-{seq % args.groups}", envelope(seq))
                for seq in range(start, min(start + 8, args.messages))
            ]
            pipe = client.pipeline(transaction=False)
            for group, message in batch:
                pipe.publish(layer.group_channel(group), json.dumps(message, separators=(",", ":")))
            pipe.execute()
        figures = json.loads(child.stdout.readline())
        child.wait(30)
    finally:
        server.stop()
    per_message_us = figures["cpu_s"] / args.messages * 1e6
    print(
        f"hiredis {'installed' if redis.utils.HIREDIS_AVAILABLE else 'not installed'}: "
        f"{args.messages} messages over {args.groups} groups, the follower's CPU "
        f"{figures['cpu_s'] * 1000:.0f} ms, {per_message_us:.1f} µs a message"
    )


if __name__ == "__main__":
    main()
