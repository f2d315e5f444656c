"""Tracing overhead: the two-pass turn with tracing off, on but unsampled, and on and exported.

Runs the real stack (uvicorn, one Celery worker, Redis, PostgreSQL, the
zero-latency scripted model) twice, each in its own process, since tracing is
configured per process by the environment:

- **off**: no OTLP endpoint (the default): the SDK is never imported;
- **on**: `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at a loopback OTLP receiver
  in this process, with `OTEL_TRACES_SAMPLER=parentbased_always_off`, so that
  in the same stack, round by round, a post without `traceparent` is an
  unsampled turn (**on, unsampled**) and a post with a sampled `traceparent`
  is traced and exported (**on, exported**).

Each turn is `POST /api/v1/conversations/{id}/messages/?wait=true` on a fresh
conversation (model call with tools, one calculator call, compose call),
timed by the client until the 200 arrives.

    .venv/bin/python bench/tracing_overhead.py [--turns 40] [--warmup 5]

Prints a table and writes bench/results/tracing_overhead.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from stack import BENCH_ENV, ROOT, percentile, running_stack, write_results


def _turns(mode: str, turns: int, warmup: int, endpoint: str) -> dict[str, list[float]]:
    """Run the stack in this process with tracing as `mode` says; the client's times by variant."""
    extra = dict(BENCH_ENV)
    variants = ["off"]
    if mode == "on":
        extra.update(
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            OTEL_TRACES_SAMPLER="parentbased_always_off",
            OTEL_BSP_SCHEDULE_DELAY="200",
        )
        variants = ["on, unsampled", "on, exported"]
    times: dict[str, list[float]] = {variant: [] for variant in variants}
    with running_stack(workers=1, extra_env=extra) as stack:
        from django.contrib.auth import get_user_model
        from rest_framework.authtoken.models import Token

        from chat.models import Conversation

        user = get_user_model().objects.create_user("bench", password="bench-password-1")
        token = Token.objects.create(user=user)
        address = urlsplit(stack["http"])
        client = http.client.HTTPConnection(address.hostname, address.port, timeout=60)

        def post(variant: str) -> float:
            conversation = Conversation.objects.create(owner=user, title="bench")
            headers = {"Authorization": f"Token {token.key}", "Content-Type": "application/json"}
            if variant == "on, exported":
                trace_id, span_id = random.getrandbits(128), random.getrandbits(64)
                headers["traceparent"] = f"00-{trace_id:032x}-{span_id:016x}-01"
            path = f"/api/v1/conversations/{conversation.id}/messages/?wait=true&timeout=30"
            started = time.perf_counter()
            client.request(
                "POST", path, body=json.dumps({"content": "what is 12*7"}), headers=headers
            )
            response = client.getresponse()
            payload = json.loads(response.read())
            elapsed = (time.perf_counter() - started) * 1000
            if response.status != 200 or payload["run"]["status"] != "completed":
                raise RuntimeError(f"turn did not complete: {response.status} {payload}")
            return elapsed

        for round_ in range(warmup + turns):
            order = variants[round_ % len(variants) :] + variants[: round_ % len(variants)]
            for variant in order:
                elapsed = post(variant)
                if round_ >= warmup:
                    times[variant].append(elapsed)
        client.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=40, help="timed turns of each variant")
    parser.add_argument("--warmup", type=int, default=5, help="untimed turns of each variant first")
    parser.add_argument("--mode", choices=["off", "on"], help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", default="", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.mode:  # a child: one stack
        times = _turns(args.mode, args.turns, args.warmup, args.endpoint)
        Path(args.out).write_text(json.dumps(times))
        return

    sys.path.insert(0, str(ROOT))
    from tests.otlp_receiver import OTLPReceiver

    receiver = OTLPReceiver().start()
    results: dict[str, list[float]] = {}
    try:
        for mode in ("off", "on"):
            out = Path(f"/tmp/toolchat-tracing-bench-{os.getpid()}-{mode}.json")
            command = [sys.executable, __file__, "--mode", mode, "--turns", str(args.turns)]
            command += ["--warmup", str(args.warmup), "--endpoint", receiver.endpoint]
            subprocess.run([*command, "--out", str(out)], check=True)
            results.update(json.loads(out.read_text()))
            out.unlink()
        time.sleep(1)  # the worker's last batch
    finally:
        receiver.stop()

    spans = len(receiver.spans)
    print(f"tracing overhead, two-pass turn (model, calculator, compose), {args.turns} turns each")
    print(f"{'variant':<18}{'n':>5}{'p50 ms':>10}{'p95 ms':>10}{'vs off':>9}")
    base = percentile(results["off"], 0.5)
    summary: dict[str, Any] = {}
    for variant, values in results.items():
        p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
        print(f"{variant:<18}{len(values):>5}{p50:>10.1f}{p95:>10.1f}{p50 / base:>8.2f}x")
        summary[variant] = {"n": len(values), "p50_ms": p50, "p95_ms": p95}
    print(
        f"spans received by the loopback collector: {spans} (4 per exported turn, warm-up included)"
    )
    path = write_results(
        "tracing_overhead",
        {"turns": args.turns, "machine": platform.platform(), "variants": summary, "spans": spans},
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
