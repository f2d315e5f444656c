"""Concurrent turns with a slow model: a slow model does not serialize turns.

Posts N turns at once (default 20 conversations, one two-pass turn each,
`POST .../messages/?wait=true` from N client threads) on the real stack with
2 Celery workers (threads pool, --concurrency threads each) and a scripted
model that waits `--delay` seconds (default 1.0) before the first token of
each of its two calls. Compares the total wall time with the serial sum of
the turns' latencies, and reports the per-turn latency distribution and the
most model calls in flight at once (from the ModelCall rows).

    .venv/bin/python bench/concurrent_turns.py [--turns 20] [--delay 1.0] [--concurrency 10]

Prints a table and writes bench/results/concurrent_turns.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import platform
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from stack import BENCH_ENV, percentile, running_stack, text_reply, tool_calls_reply, write_results
from turn_overhead import breakdown


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=20, help="conversations, one turn each")
    parser.add_argument("--delay", type=float, default=1.0, help="model seconds to first token")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--concurrency", type=int, default=10, help="threads per worker")
    parser.add_argument(
        "--db-pool",
        type=int,
        help="DATABASE_POOL_MAX_SIZE of every process (default: the project's, 10)",
    )
    args = parser.parse_args()
    extra_env = dict(BENCH_ENV)
    if args.db_pool:
        extra_env["DATABASE_POOL_MAX_SIZE"] = str(args.db_pool)

    def responder(body: dict[str, Any]) -> Any:
        last = body["messages"][-1]
        if last["role"] == "user" and body.get("tools"):
            call = [("calculator", json.dumps({"expression": "12*7"}))]
            return tool_calls_reply(call, delay_s=args.delay)
        return text_reply("12 times 7 is 84.", delay_s=args.delay)

    with running_stack(
        responder=responder,
        workers=args.workers,
        concurrency=args.concurrency,
        extra_env=extra_env,
    ) as stack:
        from django.contrib.auth import get_user_model
        from rest_framework.authtoken.models import Token

        from chat.models import Conversation, ModelCall, Run

        user = get_user_model().objects.create_user("bench", password="bench-password-1")
        token = Token.objects.create(user=user)
        address = urlsplit(stack["http"])
        headers = {"Authorization": f"Token {token.key}", "Content-Type": "application/json"}
        timeout = 30 + 4 * args.delay * args.turns

        def post(conversation_id: str) -> tuple[float, dict[str, Any]]:
            client = http.client.HTTPConnection(address.hostname, address.port, timeout=timeout)
            path = (
                f"/api/v1/conversations/{conversation_id}/messages/?wait=true&timeout={timeout:.0f}"
            )
            started = time.perf_counter()
            try:
                client.request("POST", path, body=json.dumps({"content": "12*7?"}), headers=headers)
                response = client.getresponse()
                payload = json.loads(response.read())
            finally:
                client.close()
            elapsed = time.perf_counter() - started
            if response.status != 200 or payload["run"]["status"] != "completed":
                raise RuntimeError(f"turn did not complete: {response.status} {payload}")
            return elapsed, payload

        # One untimed turn: imports and connections in the worker and the server.
        solo, _ = post(str(Conversation.objects.create(owner=user, title="warm-up").id))
        conversations = [
            str(Conversation.objects.create(owner=user, title=f"bench {i}").id)
            for i in range(args.turns)
        ]
        with ThreadPoolExecutor(max_workers=args.turns) as pool:
            started = time.perf_counter()
            outcomes = list(pool.map(post, conversations))
            wall = time.perf_counter() - started

        latencies = [elapsed for elapsed, _ in outcomes]
        run_ids = [payload["run"]["id"] for _, payload in outcomes]
        runs = list(Run.objects.filter(pk__in=run_ids))
        calls = list(ModelCall.objects.filter(run__in=runs))
        # The most model calls in flight at once, from their recorded intervals.
        edges = []
        for call in calls:
            edges.append((call.started_at, 1))
            edges.append((call.started_at + timedelta(milliseconds=call.latency_ms or 0), -1))
        in_flight = peak = 0
        for _, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):
            in_flight += step
            peak = max(peak, in_flight)
        model_s = [(call.latency_ms or 0) / 1000 for call in calls]
        segments: dict[str, list[float]] = {}
        for run_id in run_ids:
            for step, value in breakdown(run_id).items():
                if value is not None:
                    segments.setdefault(step, []).append(value / 1000)

    serial = sum(latencies)
    floor = 2 * args.delay  # two model calls per turn
    print(
        f"{args.turns} concurrent two-pass turns, model {args.delay:g} s to first token per call, "
        f"{args.workers} Celery workers x {args.concurrency} threads, "
        f"DB pool {args.db_pool or 'default (10)'} per process"
    )
    print(f"{'measure':<44}{'value':>10}")
    table = [
        ("total wall time, all turns (s)", wall),
        ("serial sum of turn latencies (s)", serial),
        ("speed-up (serial sum / wall)", serial / wall),
        ("one turn alone, untimed warm-up (s)", solo),
        ("serial estimate, turns x one turn alone (s)", solo * args.turns),
        ("speed-up (serial estimate / wall)", solo * args.turns / wall),
        ("turn latency p50 (s)", percentile(latencies, 0.5)),
        ("turn latency p95 (s)", percentile(latencies, 0.95)),
        ("turn latency max (s)", max(latencies)),
        ("turn latency min (s)", min(latencies)),
        ("model time per turn, floor (s)", floor),
        ("model call latency p50 (s)", percentile(model_s, 0.5)),
        ("run latency_ms p50 (s)", percentile([r.latency_ms / 1000 for r in runs], 0.5)),
        ("model calls in flight at once, peak", peak),
    ]
    for name, value in table:
        print(f"{name:<44}{value:>10.2f}")
    print("\nwhere a turn's time goes (from the database)")
    print(f"{'step':<48}{'p50 s':>9}{'p95 s':>9}{'max s':>9}")
    for step, values in segments.items():
        p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
        print(f"{step:<48}{p50:>9.2f}{p95:>9.2f}{max(values):>9.2f}")
    path = write_results(
        f"concurrent_turns_pool{args.db_pool}" if args.db_pool else "concurrent_turns",
        {
            "turns": args.turns,
            "delay_s": args.delay,
            "workers": args.workers,
            "concurrency": args.concurrency,
            "db_pool": args.db_pool,
            "machine": platform.platform(),
            "wall_s": wall,
            "serial_sum_s": serial,
            "latencies_s": sorted(latencies),
            "summary": dict(table),
            "segments_p50_s": {step: percentile(v, 0.5) for step, v in segments.items()},
        },
    )
    print(f"written to {path}")


if __name__ == "__main__":
    main()
