"""Turn overhead: from the REST POST to the end of the run, with a model that answers at once.

Runs N turns of each kind on the real stack (uvicorn, one Celery worker,
Redis, PostgreSQL) with the zero-latency scripted model: a two-pass turn
(model call with tools -> one calculator call -> compose call) and a direct
text answer (one model call). Each turn is one `POST
/api/v1/conversations/{id}/messages/?wait=true` with token auth, on a fresh
conversation, timed by the client until the 200 arrives. The per-step
breakdown comes from the database (Run, ModelCall, ToolExecution timestamps).

    .venv/bin/python bench/turn_overhead.py [--turns 30] [--warmup 3]

Prints a table and writes bench/results/turn_overhead.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import platform
import time
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from stack import BENCH_ENV, percentile, running_stack, text_reply, tool_calls_reply, write_results

DIRECT = "direct:"  # a user message starting with this gets a text answer at once


def responder(body: dict[str, Any]) -> Any:
    last = body["messages"][-1]
    if last["role"] == "user" and body.get("tools") and not last["content"].startswith(DIRECT):
        return tool_calls_reply([("calculator", json.dumps({"expression": "12*7"}))])
    return text_reply(" ".join(f"word{i}" for i in range(20)))


def ms(start: Any, end: Any) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds() * 1000


def breakdown(run_id: str) -> dict[str, float | None]:
    """Where one run's time went: consecutive segments that add up to the run's latency."""
    from chat.models import ModelCall, Run, ToolExecution

    run = Run.objects.get(pk=run_id)
    calls = list(ModelCall.objects.filter(run=run).order_by("started_at"))
    tool = ToolExecution.objects.filter(run=run).order_by("created_at").first()
    row: dict[str, float | None] = {"run latency_ms (created -> finished)": run.latency_ms}
    row["  queued -> claimed by a worker"] = ms(run.created_at, run.started_at)
    previous = run.started_at
    previous_name = "claimed"
    for index, call in enumerate(calls):
        row[f"  {previous_name} -> {call.purpose} call sent"] = ms(previous, call.started_at)
        row[f"  {call.purpose} call latency_ms"] = call.latency_ms
        row[f"    of which first_token_ms ({call.purpose})"] = call.first_token_ms
        previous = call.started_at + timedelta(milliseconds=call.latency_ms or 0)
        previous_name = f"{call.purpose} call end"
        if index == 0 and tool is not None:
            row[f"  {previous_name} -> tool call row stored"] = ms(previous, tool.created_at)
            row["  tool call row stored -> tool started"] = ms(tool.created_at, tool.started_at)
            row["  tool duration_ms"] = tool.duration_ms
            previous, previous_name = tool.finished_at, "tool finished"
    row[f"  {previous_name} -> run finished"] = ms(previous, run.finished_at)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=30, help="timed turns of each kind")
    parser.add_argument("--warmup", type=int, default=3, help="untimed turns of each kind first")
    args = parser.parse_args()

    kinds = {"two-pass + 1 tool": "what is 12*7", "direct text answer": f"{DIRECT} hello"}
    results: dict[str, Any] = {}
    with running_stack(responder=responder, workers=1, extra_env=BENCH_ENV) as stack:
        from django.contrib.auth import get_user_model
        from rest_framework.authtoken.models import Token

        from chat.models import Conversation

        user = get_user_model().objects.create_user("bench", password="bench-password-1")
        token = Token.objects.create(user=user)
        address = urlsplit(stack["http"])
        client = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
        headers = {"Authorization": f"Token {token.key}", "Content-Type": "application/json"}
        deadline = time.monotonic() + 300

        def post(content: str) -> tuple[float, dict[str, Any]]:
            conversation = Conversation.objects.create(owner=user, title="bench")
            body = json.dumps({"content": content})
            path = f"/api/v1/conversations/{conversation.id}/messages/?wait=true&timeout=30"
            started = time.perf_counter()
            client.request("POST", path, body=body, headers=headers)
            response = client.getresponse()
            payload = json.loads(response.read())
            elapsed = (time.perf_counter() - started) * 1000
            if response.status != 200 or payload["run"]["status"] != "completed":
                raise RuntimeError(f"turn did not complete: {response.status} {payload}")
            return elapsed, payload

        for kind, content in kinds.items():
            for _ in range(args.warmup):
                post(content)
            totals: list[float] = []
            steps: dict[str, list[float]] = {}
            for _ in range(args.turns):
                if time.monotonic() > deadline:
                    break
                elapsed, payload = post(content)
                totals.append(elapsed)
                row = breakdown(payload["run"]["id"])
                row["client: POST -> 200 minus run latency"] = elapsed - (
                    row["run latency_ms (created -> finished)"] or 0
                )
                for step, value in row.items():
                    if value is not None:
                        steps.setdefault(step, []).append(value)
            results[kind] = {"POST -> 200 (client)": totals, **steps}
        client.close()

    print(f"turn overhead, zero-latency model, 1 Celery worker ({args.turns} turns of each kind)")
    summary: dict[str, Any] = {}
    for kind, rows in results.items():
        print(f"\n{kind}")
        print(f"{'step':<48}{'n':>5}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}")
        summary[kind] = {}
        for step, values in rows.items():
            p50, p95, top = percentile(values, 0.5), percentile(values, 0.95), max(values)
            print(f"{step:<48}{len(values):>5}{p50:>10.1f}{p95:>10.1f}{top:>10.1f}")
            summary[kind][step] = {"n": len(values), "p50_ms": p50, "p95_ms": p95, "max_ms": top}
    path = write_results(
        "turn_overhead",
        {"turns": args.turns, "machine": platform.platform(), "kinds": summary},
    )
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
