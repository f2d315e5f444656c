"""History load: `history_for_model` for a conversation of 10,000 messages.

Bulk-inserts a conversation of N messages (default 10,000: user, assistant
with a tool call, tool result, assistant answer, repeated), then times
`chat.selectors.history_for_model` over R repetitions (the turn's own read,
within TOOLCHAT_HISTORY_MAX_MESSAGES and TOOLCHAT_HISTORY_MAX_CHARS), beside
every row built whole and the bare query (rows only, no building),
with the number of SQL queries of one call. On a private PostgreSQL, then on
SQLite (in a child process: Django is set up once per process).

    .venv/bin/python bench/history_load.py [--messages 10000] [--repeat 30] [--backends postgres,sqlite]

Prints a table and writes bench/results/history_load.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from stack import percentile, running_database, write_results


def measure(messages: int, repeat: int) -> dict[str, Any]:
    """Seed one conversation and time the loads (Django already set up)."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from queries_per_turn import seed_history

    from chat.history import build_model_history
    from chat.history_rows import HISTORY_COLUMNS, history_rows
    from chat.models import Message
    from chat.prompts import system_prompt_for
    from chat.selectors import history_for_model

    user = get_user_model().objects.create_user("bench", password="bench-password-1")
    started = time.perf_counter()
    conversation = seed_history(user, messages)
    seeded_s = time.perf_counter() - started

    budget = settings.TOOLCHAT_HISTORY_MAX_MESSAGES
    variants = {
        "query only (rows, no building)": lambda: list(
            Message.objects.filter(conversation_id=conversation.pk)
            .order_by("position")
            .only(*HISTORY_COLUMNS)
        ),
        "every row, built whole (history_rows, build_model_history)": lambda: build_model_history(
            history_rows(conversation=conversation),
            system_prompt=system_prompt_for(conversation),
        ),
        f"history_for_model, the turn's read ({budget} msgs)": lambda: history_for_model(
            conversation=conversation
        ),
    }
    results: dict[str, Any] = {}
    deadline = time.monotonic() + 60
    for name, load in variants.items():
        with CaptureQueriesContext(connection) as queries:
            returned = len(load())  # also the warm-up
        times: list[float] = []
        for _ in range(repeat):
            if time.monotonic() > deadline:
                break
            began = time.perf_counter()
            load()
            times.append((time.perf_counter() - began) * 1000)
        results[name] = {
            "queries": len(queries),
            "returned": returned,
            "n": len(times),
            "p50_ms": percentile(times, 0.5),
            "p95_ms": percentile(times, 0.95),
            "max_ms": max(times),
        }
    return {"messages": messages, "seed_s": seeded_s, "variants": results}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--backends", default="postgres,sqlite")
    parser.add_argument("--child-output", help=argparse.SUPPRESS)
    args = parser.parse_args()
    backends = args.backends.split(",")

    if args.child_output:  # one backend, in this process, results to a file
        with running_database(backend=backends[0]):
            result = measure(args.messages, args.repeat)
        Path(args.child_output).write_text(json.dumps(result))
        return

    results: dict[str, Any] = {}
    for backend in backends:
        output = Path(tempfile.mkdtemp(prefix="toolchat-bench-")) / "result.json"
        command = [sys.executable, __file__, "--messages", str(args.messages)]
        command += ["--repeat", str(args.repeat), "--backends", backend]
        subprocess.run([*command, "--child-output", str(output)], check=True, timeout=240)
        results[backend] = json.loads(output.read_text())

    print(f"history_for_model, {args.messages:,} messages ({args.repeat} repetitions)")
    header = f"{'backend':<10}{'variant':<44}{'queries':>8}{'returned':>9}"
    print(f"{header}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}")
    for backend, result in results.items():
        for name, row in result["variants"].items():
            print(
                f"{backend:<10}{name:<44}{row['queries']:>8}{row['returned']:>9}"
                f"{row['p50_ms']:>9.1f}{row['p95_ms']:>9.1f}{row['max_ms']:>9.1f}"
            )
    seeds = ", ".join(f"{b} {r['seed_s']:.1f} s" for b, r in results.items())
    print(f"(bulk insert of the {args.messages:,} messages: {seeds})")
    path = write_results(
        "history_load",
        {
            "messages": args.messages,
            "repeat": args.repeat,
            "machine": platform.platform(),
            "backends": results,
        },
    )
    print(f"written to {path}")


if __name__ == "__main__":
    main()
