"""The CPU of a task message sent, taken and acknowledged, with kombu's Redis transport and ours.

project/broker.py's channel makes its Redis client once a connection pool;
kombu's own made one (`redis.Redis` and its table of reply callbacks) for
every send and every acknowledgement. On a private Redis, this process sends
`--messages` messages through a kombu `SimpleQueue`, takes and acknowledges
each, with each transport in turn (`--rounds` rounds, interleaved), and
prints the CPU each took a message:

    .venv/bin/python bench/broker_client.py [--messages 1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TRANSPORTS = {
    "kombu's": "kombu.transport.redis:Transport",
    "project.broker's": "project.broker:Transport",
}


def cpu_per_message_us(url: str, transport: str, messages: int) -> float:
    """Send, take and acknowledge `messages` messages; the CPU a message, in µs."""
    from kombu import Connection

    with Connection(url, transport=transport) as connection:
        queue = connection.SimpleQueue(f"bench-{transport.replace(':', '-')}")
        for n in range(50):  # untimed: the connections and the first commands
            queue.put({"n": n})
            queue.get(timeout=5).ack()
        started = time.process_time()
        for n in range(messages):
            queue.put({"n": n})
            queue.get(timeout=5).ack()
        spent = time.process_time() - started
        queue.close()
    return spent / messages * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from tests.plugins.services import RedisServer

    server = RedisServer()
    server.start()
    figures: dict[str, list[float]] = {name: [] for name in TRANSPORTS}
    try:
        for _ in range(args.rounds):
            for name, transport in TRANSPORTS.items():
                figures[name].append(cpu_per_message_us(server.url, transport, args.messages))
    finally:
        server.stop()
    for name, spent in figures.items():
        print(
            f"{name} transport: {statistics.median(spent):.0f} µs of CPU a message sent, taken "
            f"and acknowledged (median of {args.rounds}; {min(spent):.0f} to {max(spent):.0f})"
        )


if __name__ == "__main__":
    main()
