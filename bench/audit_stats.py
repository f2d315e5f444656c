"""The audit statistics page on 100,000 stored runs.

Bulk-inserts N runs (default 100,000) spread evenly over the last 7 days, as
the engine stores them: a user's message per run, its model calls (one to
three) and tool executions (none to three, two of them in parallel in a loop
run), with latencies, first tokens, tokens, failures, timeouts and
truncations drawn from fixed distributions, and tool results of a realistic
size. Then, as a staff user through Django's test Client, GETs `/audit/` for
the last 7 days (every run), the last day and the last hour, and the two CSV
downloads, R times each after a warm-up, counting the SQL queries of each.
With `--compare-indexes` it drops the indexes of migration 0008 and times the
pages again.

    .venv/bin/python bench/audit_stats.py [--runs 100000] [--repeat 5] [--backend postgres] [--compare-indexes] [--explain]

Prints a table and writes bench/results/audit_stats.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
import uuid
from datetime import timedelta
from typing import Any

from stack import percentile, running_database, write_results

PAGES = {
    "/audit/ (last 7 days: every run)": "/audit/?period=week",
    "/audit/ (last day)": "/audit/?period=day",
    "/audit/ (last hour)": "/audit/?period=hour",
    "/audit/tools.csv (7 days)": "/audit/tools.csv?period=week",
    "/audit/models.csv (7 days)": "/audit/models.csv?period=week",
}
# The indexes migration 0008 adds for the audit's reads by period.
AUDIT_INDEXES = ("run_created_stats", "toolexec_created_stats", "modelcall_started_stats")
TOOLS = {  # name: (median ms, spread)
    "calculator": (2, 0.8),
    "get_current_time": (1, 0.5),
    "search_notes": (40, 0.7),
    "record_note": (25, 0.5),
    "generate_dataset": (2500, 0.6),
    "weather__forecast": (450, 0.9),
    "crm__lookup_customer": (180, 0.8),
    "delete_notes": (30, 0.4),
}
MODELS = ("gpt-4.1-mini", "gpt-4.1", "claude-sonnet", "offline")
RESULT = json.dumps({"success": True, "rows": [{"id": i, "title": f"row {i}"} for i in range(12)]})


def _lognormal(rng: random.Random, median: float, sigma: float) -> int:
    return max(0, int(rng.lognormvariate(0, sigma) * median))


def seed(runs: int, seed_value: int = 14) -> dict[str, int]:
    """Insert `runs` runs with their rows (Django set up); returns how many rows of each."""
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from django.utils import timezone

    from chat.models import (
        Conversation,
        ExecutionStatus,
        Message,
        ModelCall,
        Role,
        Run,
        RunStatus,
        ToolExecution,
    )

    rng = random.Random(seed_value)
    now = timezone.now()
    users = [
        get_user_model().objects.create_user(f"user{i}", password="bench-password-1")
        for i in range(50)
    ]
    # created_at is auto_now_add: let the seed say when each row was made.
    for model in (Run, Message, ToolExecution):
        model._meta.get_field("created_at").auto_now_add = False  # type: ignore[attr-defined]
    per_conversation = 100
    counts = {"runs": 0, "messages": 0, "model_calls": 0, "tool_executions": 0}
    span_s = 7 * 86400 - 120
    with transaction.atomic():  # foreign keys are checked at commit: runs before messages
        conversations = Conversation.objects.bulk_create(
            [
                Conversation(owner=users[c % len(users)], title=f"Conversation {c}")
                for c in range(-(-runs // per_conversation))
            ]
        )
        for first in range(0, runs, 5000):
            batch = range(first, min(first + 5000, runs))
            run_rows, messages, calls, tools = [], [], [], []
            for i in batch:
                conversation = conversations[i // per_conversation]
                created = now - timedelta(seconds=span_s * (1 - i / runs)) - timedelta(seconds=60)
                kind = rng.random()
                mode = "two_pass" if kind < 0.6 else ("loop" if kind < 0.85 else "direct")
                failed = rng.random() < 0.03
                run = Run(
                    id=uuid.uuid4(),
                    conversation=conversation,
                    status=RunStatus.FAILED if failed else RunStatus.COMPLETED,
                    mode=mode,
                    created_at=created,
                    started_at=created + timedelta(milliseconds=rng.randint(2, 40)),
                )
                position = 2 * (i % per_conversation)
                question = Message(
                    id=uuid.uuid4(),
                    conversation=conversation,
                    run=run,
                    position=position,
                    role=Role.USER,
                    content=f"Question {i}: please look up the figures for account {rng.randint(1, 9999)} and sum them.",
                    created_at=created,
                )
                run.trigger_message_id = question.id
                asking = Message(
                    id=uuid.uuid4(),
                    conversation=conversation,
                    run=run,
                    position=position + 1,
                    role=Role.ASSISTANT,
                    content=None,
                    tool_calls=[
                        {
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {"name": "calculator", "arguments": "{}"},
                        }
                    ],
                    latency_ms=300,
                    created_at=created,
                )
                messages += [question, asking]
                model = MODELS[i % len(MODELS)] if rng.random() < 0.9 else MODELS[0]
                steps = {"two_pass": 2, "loop": 3, "direct": 1}[mode]
                tool_steps = {"two_pass": [1], "loop": [3, 1], "direct": []}[mode]
                clock = run.started_at + timedelta(milliseconds=rng.randint(3, 15))
                for step in range(1, steps + 1):
                    latency = _lognormal(rng, 700 if model != "offline" else 20, 0.6)
                    call_failed = failed and step == steps
                    calls.append(
                        ModelCall(
                            run=run,
                            step=step,
                            purpose="tools" if step <= len(tool_steps) else "compose",
                            model=model,
                            provider="openai",
                            message_count=2 + 2 * step,
                            status="failed" if call_failed else "succeeded",
                            started_at=clock,
                            latency_ms=latency,
                            first_token_ms=None
                            if call_failed
                            else min(latency, _lognormal(rng, 250, 0.5)),
                            prompt_tokens=rng.randint(200, 4000),
                            completion_tokens=rng.randint(5, 600),
                            attempts=1,
                        )
                    )
                    clock += timedelta(milliseconds=latency + rng.randint(3, 20))
                    if step <= len(tool_steps):
                        longest = 0
                        for _ in range(tool_steps[step - 1]):
                            name = rng.choice(list(TOOLS))
                            median, sigma = TOOLS[name]
                            duration = _lognormal(rng, median, sigma)
                            longest = max(longest, duration)
                            roll = rng.random()
                            status = (
                                ExecutionStatus.FAILED
                                if roll < 0.04
                                else ExecutionStatus.TIMED_OUT
                                if roll < 0.05
                                else ExecutionStatus.SUCCEEDED
                            )
                            tools.append(
                                ToolExecution(
                                    run=run,
                                    message=asking,
                                    step=step,
                                    tool_call_id=f"call_{i}_{len(tools)}_{first}",
                                    name=name,
                                    arguments={"query": "figures", "limit": 10},
                                    status=status,
                                    result=json.loads(RESULT),
                                    content=RESULT,
                                    result_chars=len(RESULT),
                                    truncated=rng.random() < 0.05,
                                    created_at=clock,
                                    started_at=clock,
                                    finished_at=clock + timedelta(milliseconds=duration),
                                    duration_ms=duration,
                                    attempts=1,
                                )
                            )
                        clock += timedelta(milliseconds=longest + rng.randint(3, 20))
                run.finished_at = clock
                run.latency_ms = int((clock - created).total_seconds() * 1000)
                run.steps = len(tool_steps)
                run.model_calls = steps
                run_rows.append(run)
            Run.objects.bulk_create(run_rows)
            Message.objects.bulk_create(messages)
            ModelCall.objects.bulk_create(calls)
            ToolExecution.objects.bulk_create(tools)
            counts["runs"] += len(run_rows)
            counts["messages"] += len(messages)
            counts["model_calls"] += len(calls)
            counts["tool_executions"] += len(tools)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")  # what autovacuum would have done by now
    return counts


def time_pages(repeat: int) -> dict[str, Any]:
    """p50/p95/max of each page over `repeat` GETs after one warm-up, and its queries."""
    from django.contrib.auth import get_user_model
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections, connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    # As in Django's tests: the connection stays open across requests (a pooled or
    # persistent one in production), and its queries can be counted.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    staff, _ = get_user_model().objects.get_or_create(
        username="auditor", defaults={"is_staff": True}
    )
    client = Client()
    client.force_login(staff)
    results: dict[str, Any] = {}
    for name, url in PAGES.items():
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url)  # the warm-up
        assert response.status_code == 200, (url, response.status_code)
        # Read now: the next request resets the connection's log.
        captured = list(queries.captured_queries)
        slowest = max(captured, key=lambda q: float(q["time"]))
        times: list[float] = []
        for _ in range(repeat):
            began = time.perf_counter()
            client.get(url)
            times.append((time.perf_counter() - began) * 1000)
        results[name] = {
            "url": url,
            "queries": len(captured),
            "p50_ms": percentile(times, 0.5),
            "p95_ms": percentile(times, 0.95),
            "max_ms": max(times),
            "slowest_query_ms": float(slowest["time"]) * 1000,
            "slowest_query": slowest["sql"][:300],
            "bytes": len(response.content),
        }
    return results


def explain() -> dict[str, str]:
    """EXPLAIN ANALYZE of the page's heaviest queries (PostgreSQL), for the docs."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from chat.audit.period import period_preset
    from chat.audit.stats import audit_stats

    with CaptureQueriesContext(connection) as queries:
        audit_stats(period_preset("week"))
    plans: dict[str, str] = {}
    with connection.cursor() as cursor:
        for query in queries.captured_queries:
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {query['sql']}")
            plans[query["sql"][:120]] = "\n".join(row[0] for row in cursor.fetchall())
    return plans


def drop_audit_indexes() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for name in AUDIT_INDEXES:
            cursor.execute(f'DROP INDEX IF EXISTS "{name}"')
        if connection.vendor == "postgresql":
            cursor.execute("ANALYZE")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--backend", default="postgres", choices=["postgres", "sqlite"])
    parser.add_argument("--compare-indexes", action="store_true")
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args()

    with running_database(backend=args.backend):
        started = time.perf_counter()
        counts = seed(args.runs)
        seeded_s = time.perf_counter() - started
        variants = {"with the audit indexes": time_pages(args.repeat)}
        plans = explain() if args.explain and args.backend == "postgres" else {}
        if args.compare_indexes:
            drop_audit_indexes()
            variants["without them"] = time_pages(args.repeat)

    print(
        f"audit statistics, {counts['runs']:,} runs ({counts['model_calls']:,} model calls, "
        f"{counts['tool_executions']:,} tool executions, {counts['messages']:,} messages) "
        f"on {args.backend}, {args.repeat} requests each"
    )
    print(
        f"{'variant':<24}{'page':<36}{'queries':>8}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}{'slowest q':>11}"
    )
    for variant, pages in variants.items():
        for name, row in pages.items():
            print(
                f"{variant:<24}{name:<36}{row['queries']:>8}{row['p50_ms']:>9.1f}"
                f"{row['p95_ms']:>9.1f}{row['max_ms']:>9.1f}{row['slowest_query_ms']:>11.1f}"
            )
    print(f"(bulk insert: {seeded_s:.1f} s)")
    for sql, plan in plans.items():
        print(f"\n-- {sql}\n{plan}")
    path = write_results(
        "audit_stats",
        {
            "runs": args.runs,
            "repeat": args.repeat,
            "backend": args.backend,
            "rows": counts,
            "seed_s": seeded_s,
            "machine": platform.platform(),
            "variants": variants,
            "plans": plans,
        },
    )
    print(f"written to {path}")


if __name__ == "__main__":
    main()
