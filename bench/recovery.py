"""Recovery time: how soon a SIGKILLed worker's runs move again on the worker that is left.

The real stack (PostgreSQL, Redis, two Celery workers with docker-compose's
threads pool, Celery beat running `runs_recover` every TOOLCHAT_RECOVER_S)
with the default recovery settings. `--runs` turns are started at once, each
with work in flight when the first worker is killed: half stream a slow answer
(a model call in flight), half run a slow tool (`slow_side_effect`, not
idempotent: recorded interrupted, never repeated). When every run has its work
in flight, worker 0 is killed (SIGKILL to its process group). For each run
that worker held, "moving again" is the first event of the run after the
kill, written by the other worker (the retried model call's announcement, the
interrupted call's result); "done" is when the run completed.

    .venv/bin/python bench/recovery.py [--runs 24]

The target (issue 9) is every interrupted run moving again within 15 s.
Prints a table and writes bench/results/recovery.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from stack import BENCH_ENV, ROOT, percentile, running_stack, text_reply, write_results

from tests.llm_server import Reply, tool_calls_reply

SLOW_S = 30  # how long the work in flight would take: far past the target
TARGET_S = 15.0


def responder(body: dict[str, Any]) -> Reply:
    """A slow tool or a slow answer, by the run's message; a quick answer after a tool."""
    messages = body["messages"]
    if messages[-1]["role"] == "tool":
        return text_reply("Here is where things stand.")
    prompt = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    if prompt.startswith("tool"):
        arguments = json.dumps({"label": prompt, "seconds": SLOW_S})
        return tool_calls_reply([("slow_side_effect", arguments)])
    words = " ".join(f"word{n}" for n in range(SLOW_S * 2))
    return text_reply(words, chunk_delay_s=0.5)


QUIET_S = 2.5


def victims(run: Any, kill_time: datetime, victim_pid: int) -> bool:
    """Whether the killed worker held this run's work in flight."""
    from chat.models import RunEvent, ToolExecution

    call = ToolExecution.objects.filter(run=run).order_by("created_at").first()
    if call is not None:
        return call.worker.endswith(f":{victim_pid}")
    return not RunEvent.objects.filter(
        run=run,
        created_at__gt=kill_time,
        created_at__lt=kill_time + timedelta(seconds=QUIET_S),
    ).exists()


def in_flight(run: Any) -> bool:
    from chat.models import ExecutionStatus, RunEvent, ToolExecution

    return (
        ToolExecution.objects.filter(run=run, status=ExecutionStatus.RUNNING).exists()
        or RunEvent.objects.filter(run=run, type="message.delta").exists()
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=24)
    args = parser.parse_args()
    # The test settings turn the sweep off unless told: here it runs at its default.
    env = {**BENCH_ENV, "TOOLCHAT_RECOVER_S": "5"}

    with running_stack(responder=responder, workers=2, concurrency=50, extra_env=env) as stack:
        from django.conf import settings
        from django.contrib.auth import get_user_model

        from chat.models import Conversation, Run, RunEvent, RunStatus
        from chat.services.runs import run_start

        beat = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "project",
                "beat",
                "-l",
                "info",
                "-s",
                str(stack["logs"] / "celerybeat-schedule"),
            ],
            cwd=ROOT,
            env=stack["env"],
            stdout=(stack["logs"] / "beat.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        try:
            user = get_user_model().objects.create_user("bench", password="bench-password-1")
            runs = []
            for n in range(args.runs):
                conversation = Conversation.objects.create(owner=user, title=f"recovery {n}")
                prompt = f"{'tool' if n % 2 else 'model'} {n}"
                runs.append(run_start(conversation=conversation, content=prompt))
            deadline = time.monotonic() + 60
            while not all(in_flight(run) for run in runs):
                if time.monotonic() > deadline:
                    raise SystemExit("not every run had its work in flight within 60 s")
                time.sleep(0.2)
            time.sleep(1.0)  # past the first events, well inside the slow work
            victim = stack["pids"]["worker0"]
            killed_at = time.time()
            os.killpg(victim, signal.SIGKILL)

            # The victim's runs: a tool run's call ran there; a streaming run is
            # silent for the first seconds after the kill (the others stream on).
            time.sleep(QUIET_S + 0.5)
            kill_time = datetime.fromtimestamp(killed_at, tz=UTC)
            quiet = [run for run in runs if victims(run, kill_time, victim)]
            deadline = time.monotonic() + 120
            while Run.objects.filter(
                pk__in=[r.pk for r in runs], status__in=(RunStatus.QUEUED, RunStatus.RUNNING)
            ).exists():
                if time.monotonic() > deadline:
                    break
                time.sleep(0.5)
        finally:
            beat.terminate()
            beat.wait(10)

        from chat.models import ToolExecution

        tool_workers = sorted(
            ToolExecution.objects.filter(run__in=runs).values_list("worker", flat=True)
        )
        rows = []
        for run in quiet:
            run.refresh_from_db()
            first = (
                RunEvent.objects.filter(run=run, created_at__gt=kill_time).order_by("seq").first()
            )
            rows.append(
                {
                    "run": str(run.pk),
                    "kind": run.trigger_message.content.split()[0],
                    "status": run.status,
                    "moving_again_s": (first.created_at - kill_time).total_seconds()
                    if first
                    else None,
                    "done_s": (run.finished_at - kill_time).total_seconds()
                    if run.finished_at
                    else None,
                }
            )

    moving = [r["moving_again_s"] for r in rows if r["moving_again_s"] is not None]
    done = [r["done_s"] for r in rows if r["done_s"] is not None]
    stuck = [r for r in rows if r["status"] != "completed"]
    summary = {
        "runs": args.runs,
        "interrupted": len(rows),
        "moving_again_p50_s": percentile(moving, 0.5),
        "moving_again_max_s": max(moving) if moving else None,
        "completed_p50_s": percentile(done, 0.5),
        "completed_max_s": max(done) if done else None,
        "not_completed": len(stuck),
        "target_s": TARGET_S,
        "met": bool(moving) and max(moving) <= TARGET_S and not stuck and len(moving) == len(rows),
        "settings": {
            "TOOLCHAT_RUN_STALE_S": settings.TOOLCHAT_RUN_STALE_S,
            "TOOLCHAT_HEARTBEAT_S": settings.TOOLCHAT_HEARTBEAT_S,
            "TOOLCHAT_RECOVER_S": 5.0,
        },
    }
    print()
    print(f"worker SIGKILL with {args.runs} runs in flight; {len(rows)} were the dead worker's")
    print(f"{'':32} {'p50':>8} {'max':>8}")
    print(
        f"{'moving again after the kill (s)':32} {summary['moving_again_p50_s']:>8.1f} "
        f"{summary['moving_again_max_s'] or float('nan'):>8.1f}"
    )
    for kind, label in (("tool", "a tool's run"), ("model", "a streaming run")):
        times = [r["done_s"] for r in rows if r["kind"] == kind and r["done_s"] is not None]
        if times:
            print(
                f"{'completed, ' + label + ' (s)':32} {percentile(times, 0.5):>8.1f} "
                f"{max(times):>8.1f}"
            )
    print(
        f"not completed: {len(stuck)}; target: every run moving within {TARGET_S:g} s: "
        f"{'met' if summary['met'] else 'MISSED'}"
    )
    path = write_results(
        "recovery",
        {
            "machine": platform.platform(),
            "summary": summary,
            "victim_pid": victim,
            "tool_workers": tool_workers,
            "runs": rows,
        },
    )
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
