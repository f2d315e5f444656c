"""Concurrent turns with a slow model: a slow model does not serialize turns.

Posts N turns at once (default 20 conversations, one two-pass turn each,
`POST .../messages/?wait=true` from N client threads) on the real stack with
2 Celery workers (threads pool, --concurrency threads each) and a scripted
model that waits `--delay` seconds (default 1.0) before the first token of
each of its two calls. Compares the total wall time with the serial sum of
the turns' latencies and with one turn alone (the median of 3, after a
warm-up), and reports the per-turn latency distribution, the turns that did
not complete (errors), the most model calls in flight at once (from the
ModelCall rows) and the most connections PostgreSQL had open at once
(`pg_stat_activity`, read every 50 ms during the run).

    .venv/bin/python bench/concurrent_turns.py [--turns 20] [--delay 1.0] [--concurrency 50]
    .venv/bin/python bench/concurrent_turns.py --turns 200 --delay 0.5   # DESIGN.md's budget
    .venv/bin/python bench/concurrent_turns.py --turns 400 --delay 0.5 --profile
    .venv/bin/python bench/concurrent_turns.py --turns 200 --delay 0.5 --rounds 3   # steady state

`--profile` runs py-spy (the thread holding the GIL) on the web process and
on each worker while the turns run, and prints each one's top entries; the
collapsed stacks are written beside the JSON (`concurrent_turns.<process>.folded`).

Prints a table and writes bench/results/concurrent_turns.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from profile_turn import profile_print, profile_start, profile_stop, summarize
from stack import (
    BENCH_ENV,
    machine_cpu,
    percentile,
    process_cpu,
    running_stack,
    text_reply,
    tool_calls_reply,
    write_results,
)
from turn_overhead import breakdown

CONNECTIONS_SQL = (
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


def cpu_seconds(
    pids: dict[str, int | None], services: dict[str, int | None] | None = None
) -> dict[str, float]:
    """CPU seconds used so far: the machine, the web server, the workers, the database, this process.

    `services` are PostgreSQL's postmaster and Redis (their own processes, so
    other work on the machine does not count as theirs); "rest" is the machine's
    CPU less all of those: the kernel, and whatever else ran meanwhile.
    """
    machine = machine_cpu()
    web = process_cpu(pids["web"]) if pids.get("web") else 0.0
    workers = sum(process_cpu(pid) for name, pid in pids.items() if name != "web" and pid)
    database = sum(process_cpu(pid) for pid in (services or {}).values() if pid)
    own = os.times()
    bench = own.user + own.system
    return {
        "machine": machine,
        "web": web,
        "workers": workers,
        "database": database,
        "bench": bench,
        "rest": machine - web - workers - database - bench,
    }


class ConnectionWatch:
    """Reads how many connections the database has (this one aside) every `interval` s."""

    def __init__(self, url: str, interval: float = 0.05) -> None:
        self.url = url
        self.interval = interval
        self.peak = 0
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as connection:
            while not self._stop.is_set():
                row = connection.execute(CONNECTIONS_SQL).fetchone()
                count = int(row[0]) if row else 0
                self.samples.append(count)
                self.peak = max(self.peak, count)
                self._stop.wait(self.interval)

    def __enter__(self) -> ConnectionWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=20, help="conversations, one turn each")
    parser.add_argument("--delay", type=float, default=1.0, help="model seconds to first token")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument(
        "--concurrency", type=int, default=50, help="threads per worker (docker-compose's default)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="how long each POST waits for its run (?wait=true&timeout=), in seconds",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="post the turns this many times; the figures are the last round's",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy on the web process and the workers while the turns run",
    )
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
        from django.db import connection
        from rest_framework.authtoken.models import Token

        from chat.models import Conversation, ModelCall, Run

        user = get_user_model().objects.create_user("bench", password="bench-password-1")
        token = Token.objects.create(user=user)
        address = urlsplit(stack["http"])
        headers = {"Authorization": f"Token {token.key}", "Content-Type": "application/json"}
        timeout = args.timeout

        def post(conversation_id: str) -> tuple[float, dict[str, Any] | None, str | None]:
            """One turn: its latency, and its payload or why it did not complete."""
            # A little longer than the server's wait, so that a turn still running
            # when the wait ends comes back as the server's 202, not as a client timeout.
            client = http.client.HTTPConnection(
                address.hostname, address.port, timeout=timeout + 15
            )
            path = (
                f"/api/v1/conversations/{conversation_id}/messages/?wait=true&timeout={timeout:.0f}"
            )
            started = time.perf_counter()
            try:
                client.request("POST", path, body=json.dumps({"content": "12*7?"}), headers=headers)
                response = client.getresponse()
                payload = json.loads(response.read())
            except Exception as exc:
                elapsed = time.perf_counter() - started
                return elapsed, None, f"{conversation_id}: {type(exc).__name__}: {exc}"
            finally:
                client.close()
            elapsed = time.perf_counter() - started
            if response.status != 200 or payload.get("run", {}).get("status") != "completed":
                run = payload.get("run") or {}
                return (
                    elapsed,
                    None,
                    f"{conversation_id}: HTTP {response.status}, run {run.get('status')}: "
                    f"{json.dumps(payload)[:300]}",
                )
            return elapsed, payload, None

        def alone() -> float:
            conversation = Conversation.objects.create(owner=user, title="alone")
            elapsed, _, error = post(str(conversation.id))
            if error:
                raise RuntimeError(f"a turn alone did not complete: {error}")
            return elapsed

        # One untimed turn (imports and connections in the worker and the server),
        # then one turn alone, three times: the yardstick of the concurrent run.
        warmup = alone()
        solo = percentile([alone() for _ in range(3)], 0.5)
        results = Path(__file__).resolve().parent / "results"
        folded = {name: results / f"concurrent_turns.{name}.folded" for name in stack["pids"]}
        per_round: list[float] = []
        for number in range(args.rounds):
            # Every round on fresh conversations; the figures are the last round's
            # (the earlier ones warm the servers' threads and pools to the load).
            conversations = [
                str(Conversation.objects.create(owner=user, title=f"bench {number}.{i}").id)
                for i in range(args.turns)
            ]
            last = number == args.rounds - 1
            with (
                ConnectionWatch(stack["env"]["DATABASE_URL"]) as connections,
                ThreadPoolExecutor(max_workers=args.turns) as pool,
            ):
                spies = []
                if args.profile and last:
                    for name, pid in stack["pids"].items():
                        folded[name].unlink(missing_ok=True)
                        spies.append((profile_start(pid, folded[name]), folded[name]))
                cpu_before = cpu_seconds(stack["pids"], stack["service_pids"])
                started = time.perf_counter()
                outcomes = list(pool.map(post, conversations))
                wall = time.perf_counter() - started
                for spy, path in spies:
                    profile_stop(spy, path)
                cpu_used = {
                    name: after - cpu_before[name]
                    for name, after in cpu_seconds(stack["pids"], stack["service_pids"]).items()
                }
            per_round.append(
                1000 * (cpu_used["web"] + cpu_used["workers"] + cpu_used["database"]) / args.turns
            )

        errors = [error for _, _, error in outcomes if error]
        # What the database says about the turns that did not complete for the client.
        for index, error in enumerate(errors):
            conversation_id = error.split(":", 1)[0]
            run = Run.objects.filter(conversation_id=conversation_id).first()
            if run is not None:
                errors[index] += (
                    f" [stored run {run.status}, latency_ms {run.latency_ms}, "
                    f"finished {run.finished_at and run.finished_at.isoformat()}]"
                )
        latencies = [elapsed for elapsed, payload, _ in outcomes if payload]
        run_ids = [payload["run"]["id"] for _, payload, _ in outcomes if payload]
        if not latencies:
            raise RuntimeError(f"no turn completed; first error: {errors[0]}")
        runs = list(Run.objects.filter(pk__in=run_ids))
        with connection.cursor() as cursor:
            cursor.execute("SHOW max_connections")
            max_connections = int(cursor.fetchone()[0])
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
    # A POST answered when its wait ran out although its run had ended long before:
    # the waiting view missed the run's last event.
    late = sum(1 for latency in latencies if latency >= args.timeout)
    floor = 2 * args.delay  # two model calls per turn
    print(
        f"{args.turns} concurrent two-pass turns, model {args.delay:g} s to first token per call, "
        f"{args.workers} Celery workers x {args.concurrency} threads, "
        f"DB pool {args.db_pool or 'default (20)'} per process"
    )
    print(f"{'measure':<44}{'value':>10}")
    table = [
        ("total wall time, all turns (s)", wall),
        ("one turn alone, p50 of 3 (s)", solo),
        ("wall / one turn alone", wall / solo),
        ("turns that did not complete (errors)", len(errors)),
        ("completed, but answered only at the wait timeout", late),
        ("PostgreSQL connections, peak", connections.peak),
        ("PostgreSQL max_connections", max_connections),
        ("serial sum of turn latencies (s)", serial),
        ("speed-up (serial sum / wall)", serial / wall),
        ("warm-up turn, untimed (s)", warmup),
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
        ("CPU of the machine, both cores (s)", cpu_used["machine"]),
        ("  of which the web server (s)", cpu_used["web"]),
        ("  of which the Celery workers (s)", cpu_used["workers"]),
        ("  of which PostgreSQL and Redis (s)", cpu_used["database"]),
        ("  of which this process: model server, clients (s)", cpu_used["bench"]),
        ("  of which the rest: kernel, other work (s)", cpu_used["rest"]),
        (
            "CPU ms per turn, toolchat's processes",
            1000 * (cpu_used["web"] + cpu_used["workers"]) / args.turns,
        ),
        (
            "CPU ms per turn, web + workers + database",
            1000 * (cpu_used["web"] + cpu_used["workers"] + cpu_used["database"]) / args.turns,
        ),
    ]
    for name, value in table:
        print(f"{name:<44}{value:>10.2f}")
    if args.rounds > 1:
        print("CPU ms per turn, web + workers + database, round by round:")
        print("  " + ", ".join(f"{value:.1f}" for value in per_round))
    for error in errors[:5]:
        print(f"error: {error}")
    print("\nwhere a turn's time goes (from the database)")
    print(f"{'step':<48}{'p50 s':>9}{'p95 s':>9}{'max s':>9}")
    for step, values in segments.items():
        p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
        print(f"{step:<48}{p50:>9.2f}{p95:>9.2f}{max(values):>9.2f}")
    profiles = {name: summarize(path, top=20) for name, path in folded.items() if args.profile}
    for name, profile in profiles.items():
        profile_print(name, profile)
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
            "one_turn_s": solo,
            "errors": len(errors),
            "answered_at_wait_timeout": late,
            "wait_timeout_s": args.timeout,
            "error_messages": errors[:20],
            "postgres_connections_peak": connections.peak,
            "postgres_max_connections": max_connections,
            "serial_sum_s": serial,
            "latencies_s": sorted(latencies),
            "summary": dict(table),
            "segments_p50_s": {step: percentile(v, 0.5) for step, v in segments.items()},
            "profiles": profiles,
            "rounds": args.rounds,
            "cpu_ms_per_turn_by_round": per_round,
        },
    )
    print(f"written to {path}")


if __name__ == "__main__":
    main()
