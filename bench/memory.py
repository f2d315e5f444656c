"""Memory per turn: the resident size of a worker and of the web server as turns add up.

Runs `--turns` two-pass turns (default 1,000; one calculator call each) on the
real stack (uvicorn, one Celery worker with docker-compose's pool, Redis,
PostgreSQL) with the zero-latency scripted model, `--clients` at a time, each
`POST .../messages/?wait=true` on a conversation of its own. Reads the
resident set size (VmRSS, with the worker's children for a prefork pool) of
the worker and the web process after 10, 100, 250, 500 and every further 250
turns. A process that keeps something per turn grows between 100 and 1,000;
the budget is 10%.

    .venv/bin/python bench/memory.py [--turns 1000] [--clients 4]

Prints a table and writes bench/results/memory.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import platform
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from stack import BENCH_ENV, process_tree, running_stack, write_results
from turn_overhead import responder


def rss_mib(pid: int) -> float:
    """The resident size of a process and its children, in MiB."""
    total = 0
    for member in process_tree(pid):
        try:
            status = Path(f"/proc/{member}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def checkpoints(turns: int) -> list[int]:
    marks = [10, 100, 250, *range(500, turns + 1, 250)]
    return sorted({mark for mark in marks if mark <= turns} | {turns})


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=4, help="turns posted at once")
    parser.add_argument("--concurrency", type=int, default=50, help="threads of the worker")
    args = parser.parse_args()

    with running_stack(
        responder=responder, workers=1, concurrency=args.concurrency, extra_env=BENCH_ENV
    ) as stack:
        from django.contrib.auth import get_user_model
        from rest_framework.authtoken.models import Token

        from chat.models import Conversation

        user = get_user_model().objects.create_user("bench", password="bench-password-1")
        token = Token.objects.create(user=user)
        address = urlsplit(stack["http"])
        headers = {"Authorization": f"Token {token.key}", "Content-Type": "application/json"}
        pids = {"worker": stack["pids"]["worker0"], "web": stack["pids"]["web"]}
        conversations = [
            str(Conversation.objects.create(owner=user, title=f"memory {n}").id)
            for n in range(args.turns)
        ]
        marks = checkpoints(args.turns)
        samples: list[dict[str, Any]] = []
        done = 0
        failed: list[str] = []
        lock = threading.Lock()

        def post(conversation_id: str) -> None:
            nonlocal done
            client = http.client.HTTPConnection(address.hostname, address.port, timeout=90)
            try:
                client.request(
                    "POST",
                    f"/api/v1/conversations/{conversation_id}/messages/?wait=true",
                    body=json.dumps({"content": "what is 12*7?"}),
                    headers=headers,
                )
                response = client.getresponse()
                payload = json.loads(response.read())
                if response.status != 200 or payload["run"]["status"] != "completed":
                    failed.append(f"{conversation_id}: HTTP {response.status}")
            except Exception as exc:
                failed.append(f"{conversation_id}: {type(exc).__name__}: {exc}")
            finally:
                client.close()
            with lock:
                done += 1
                if done in marks:
                    samples.append(
                        {
                            "turns": done,
                            **{f"{name}_rss_mib": rss_mib(pid) for name, pid in pids.items()},
                        }
                    )

        with ThreadPoolExecutor(max_workers=args.clients) as pool:
            list(pool.map(post, conversations))

    by_turns = {sample["turns"]: sample for sample in samples}
    growth = {}
    if 100 in by_turns and args.turns in by_turns:
        for name in pids:
            before = by_turns[100][f"{name}_rss_mib"]
            after = by_turns[args.turns][f"{name}_rss_mib"]
            growth[name] = 100 * (after - before) / before
    print(
        f"Resident memory over {args.turns} two-pass turns, {args.clients} at a time "
        f"(1 worker, threads x {args.concurrency}; uvicorn)"
    )
    print(f"{'turns':>7}{'worker MiB':>12}{'web MiB':>10}")
    for sample in sorted(samples, key=lambda sample: sample["turns"]):
        print(
            f"{sample['turns']:>7}{sample['worker_rss_mib']:>12.1f}{sample['web_rss_mib']:>10.1f}"
        )
    for name, value in growth.items():
        print(f"{name}: {value:+.1f}% from 100 to {args.turns} turns (budget: within 10%)")
    print(f"turns that did not complete: {len(failed)}")
    for failure in failed[:5]:
        print(f"  {failure}")
    path = write_results(
        "memory",
        {
            "turns": args.turns,
            "clients": args.clients,
            "concurrency": args.concurrency,
            "machine": platform.platform(),
            "samples": samples,
            "growth_percent_100_to_end": growth,
            "failed": failed,
        },
    )
    print(f"written to {path}")


if __name__ == "__main__":
    main()
