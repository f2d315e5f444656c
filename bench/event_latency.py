"""Event latency: from the worker's publish to the WebSocket client's receipt.

Runs N two-pass turns on the real stack (Celery worker -> Redis channel layer
-> uvicorn -> WebSocket client) with a zero-latency scripted model, and times
every event from its `ts` (stamped by the worker when it stored the event,
just before it is published on commit) to when the client read it.

    .venv/bin/python bench/event_latency.py [--runs 20]

Prints a table and writes bench/results/event_latency.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections import defaultdict
from datetime import datetime

from stack import percentile, running_stack, write_results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()

    with running_stack() as stack:
        from django.contrib.auth import get_user_model
        from rest_framework.authtoken.models import Token
        from websockets.sync.client import connect

        from chat.models import Conversation

        user = get_user_model().objects.create_user("bench", password="bench-password-1")
        token = Token.objects.create(user=user)
        conversation = Conversation.objects.create(owner=user, title="bench")
        url = f"{stack['ws']}/ws/conversations/{conversation.id}/?after=0"
        latencies: dict[str, list[float]] = defaultdict(list)
        with connect(url, additional_headers={"Authorization": f"Token {token.key}"}) as socket:
            for _ in range(args.runs):
                socket.send(json.dumps({"type": "message", "content": "what is 12*7"}))
                while True:
                    message = json.loads(socket.recv(timeout=30))
                    received = time.time()
                    if "seq" not in message:
                        continue
                    sent = datetime.fromisoformat(message["ts"].replace("Z", "+00:00")).timestamp()
                    latencies[message["type"]].append((received - sent) * 1000)
                    if message["type"] in {"run.completed", "run.failed"}:
                        break

    every = [value for values in latencies.values() for value in values]
    rows = [("all events", every), *sorted(latencies.items())]
    print(f"event latency, worker publish -> WebSocket client ({args.runs} two-pass runs)")
    print(f"{'event':<22}{'count':>7}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}")
    summary = {}
    for name, values in rows:
        p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
        print(f"{name:<22}{len(values):>7}{p50:>10.1f}{p95:>10.1f}{max(values):>10.1f}")
        summary[name] = {"count": len(values), "p50_ms": p50, "p95_ms": p95, "max_ms": max(values)}
    path = write_results(
        "event_latency",
        {"runs": args.runs, "machine": platform.platform(), "events": summary},
    )
    print(f"written to {path}")


if __name__ == "__main__":
    main()
