"""Flat in history length: a turn's own overhead at 10, 1,000 and 10,000 stored messages.

On the production stack (uvicorn with the production settings, one Celery
worker, Redis, PostgreSQL) with the scripted model answering at once, each
round seeds a fresh conversation of each length (user / assistant tool call /
tool result / answer, bulk-inserted, untimed) and posts one two-pass turn to
each, in an order rotated from round to round so that the machine's drift
falls on every length alike. The turn's own overhead is the run's wall time
(created -> finished, from the Run row) minus its model calls' `latency_ms`
and its tool call's time (ModelCall and ToolExecution rows); the POST's
overhead is the client's time from the POST to its 200 minus the same. What
grows with the history shows in the run's segments (printed per length). A
model call's latency_ms is timed around the openai SDK's call, so building
and sending the request is in it, not in the overhead.

Beside it, in the same rounds, the bare loop (bench/bare_loop.py) runs the
same two-pass turn with the history toolchat sent at each length already in
its list, as a loop that keeps its conversation in memory would: its turn's
wall time is the yardstick for what sending that history costs anyway.

    .venv/bin/python bench/history_flat.py [--lengths 10,1000,10000] [--rounds 15] [--warmup 2]
        [--collector]

The check: the p50 overheads of all lengths within 10% of the smallest. The
mean and the largest show what a p50 does not: a pause in a few turns (the
garbage collector's full pass, project/collector.py); `--collector` starts
the servers with bench/collector/ on their PYTHONPATH and prints each
process's full passes during the timed rounds. Past
TOOLCHAT_HISTORY_MAX_MESSAGES (400) every turn sends the same number of
messages, so the change from one length to the next is printed too.
Prints a table and writes bench/results/history_flat.json.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from bare_loop import bare_turn, make_client, offered_tools
from compare import PRODUCTION_ENV, machine_info
from queries_per_turn import seed_history
from stack import BENCH_ENV, percentile, running_stack, stepping_responder, write_results
from turn_overhead import breakdown

FLAT_WITHIN = 0.10  # the budget: overhead at every length within 10%
TURN_TIMEOUT_S = 30
COLLECTOR_PROBE = Path(__file__).resolve().parent / "collector"


def collector_passes(log: Path, since: float, until: float) -> dict[str, dict[str, float]]:
    """The servers' full collector passes between two times, by process: count, ms, frozen."""
    passes: dict[str, dict[str, float]] = {}
    for line in log.read_text().splitlines():
        pid, role, ended, ms, frozen = line.split("\t")
        if role == "other" or not since <= float(ended) <= until:
            continue
        row = passes.setdefault(f"{role} {pid}", {"passes": 0, "ms": 0.0, "longest": 0.0})
        row["passes"] += 1
        row["ms"] += float(ms)
        row["longest"] = max(row["longest"], float(ms))
        row["frozen"] = int(frozen)
    return passes


def turn_times(run_id: str) -> dict[str, float]:
    """One run's wall time and the model's and the tool's share of it, in ms, from its rows."""
    from chat.models import ModelCall, Run, ToolExecution

    run = Run.objects.get(pk=run_id)
    assert run.finished_at is not None
    model = sum(call.latency_ms or 0 for call in ModelCall.objects.filter(run=run))
    # The tool's own time (its finished_at is stamped once its result is stored).
    tool = sum(row.duration_ms or 0 for row in ToolExecution.objects.filter(run=run))
    wall = (run.finished_at - run.created_at).total_seconds() * 1000
    return {"run": wall, "model": model, "tool": tool, "overhead": wall - model - tool}


def spread(values: list[float]) -> dict[str, float]:
    """p50, the middle half (p25 to p75), p95, the mean and the extremes of a list of ms."""
    return {
        "n": len(values),
        "mean": sum(values) / len(values),
        "p50": percentile(values, 0.5),
        "p25": percentile(values, 0.25),
        "p75": percentile(values, 0.75),
        "p95": percentile(values, 0.95),
        "min": min(values),
        "max": max(values),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lengths", default="10,1000,10000", help="stored messages before a turn")
    parser.add_argument("--rounds", type=int, default=15, help="timed turns of each length")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    parser.add_argument(
        "--collector", action="store_true", help="count the servers' full collector passes"
    )
    args = parser.parse_args()
    lengths = [int(value) for value in args.lengths.split(",")]

    machine = machine_info()
    samples: dict[int, dict[str, list[float]]] = {n: {} for n in lengths}
    segments: dict[int, dict[str, list[float]]] = {n: {} for n in lengths}
    sent: dict[int, set[int]] = {n: set() for n in lengths}
    extra_env = {**BENCH_ENV, **PRODUCTION_ENV}
    probe_log: Path | None = None
    if args.collector:
        probe_log = Path(tempfile.mkdtemp(prefix="toolchat-collector-")) / "passes.log"
        probe_log.touch()
        path = os.pathsep.join(filter(None, [str(COLLECTOR_PROBE), os.environ.get("PYTHONPATH")]))
        extra_env |= {"PYTHONPATH": path, "TOOLCHAT_COLLECTOR_LOG": str(probe_log)}
    timed = [0.0, 0.0]  # when the timed rounds began and ended
    with running_stack(responder=stepping_responder(), workers=1, extra_env=extra_env) as stack:
        from django.contrib.auth import get_user_model
        from rest_framework.authtoken.models import Token

        logging.disable(logging.INFO)
        user = get_user_model().objects.create_user("bench", password="bench-password-1")
        token = Token.objects.create(user=user)
        address = urlsplit(stack["http"])
        client = http.client.HTTPConnection(
            address.hostname, address.port, timeout=TURN_TIMEOUT_S + 15
        )
        headers = {"Authorization": f"Token {token.key}", "Content-Type": "application/json"}
        llm = stack["llm"]
        bare_client, bare_tools = make_client(llm.base_url), offered_tools()
        histories: dict[int, list[dict]] = {}  # what toolchat sent before the user's message
        bare: dict[int, list[float]] = {n: [] for n in lengths}

        def turn(length: int) -> tuple[float, str, int]:
            """A turn on a fresh conversation of `length` messages: POST ms, run id, sent."""
            conversation = seed_history(user, length)
            path = (
                f"/api/v1/conversations/{conversation.pk}/messages/"
                f"?wait=true&timeout={TURN_TIMEOUT_S}"
            )
            body = json.dumps({"content": "what is 12*7"})
            llm.clear()
            started = time.perf_counter()
            client.request("POST", path, body=body, headers=headers)
            response = client.getresponse()
            payload = json.loads(response.read())
            elapsed = (time.perf_counter() - started) * 1000
            if response.status != 200 or payload["run"]["status"] != "completed":
                raise RuntimeError(f"the turn did not complete: {response.status} {payload}")
            if payload["run"]["model_calls"] != 2:
                raise RuntimeError(f"not a two-pass turn: {payload['run']}")
            histories.setdefault(length, llm.requests[0]["messages"][:-1])
            return elapsed, str(payload["run"]["id"]), len(llm.requests[0]["messages"])

        def bare_two_pass(length: int) -> float:
            """The bare loop's turn with the history toolchat sent at `length`, in ms."""
            llm.clear()
            history = histories[length]
            turn = bare_turn(bare_client, tools=bare_tools, content="what is 12*7", history=history)
            if turn.model_calls != 2 or len(llm.requests[0]["messages"]) != len(history) + 1:
                raise RuntimeError(f"the bare loop's turn was not the same: {turn}")
            return turn.total_ms

        print(
            f"{args.warmup} + {args.rounds} rounds of {', '.join(map(str, lengths))} "
            "stored messages ...",
            flush=True,
        )
        for number in range(args.warmup + args.rounds):
            if number == args.warmup:
                timed[0] = time.time()
            shift = number % len(lengths)
            for length in lengths[shift:] + lengths[:shift]:
                elapsed, run_id, first_request = turn(length)
                bare_ms = bare_two_pass(length)
                if number < args.warmup:
                    continue
                bare[length].append(bare_ms)
                times = turn_times(run_id)
                times["post"] = elapsed
                times["post overhead"] = elapsed - times["model"] - times["tool"]
                for name, value in times.items():
                    samples[length].setdefault(name, []).append(value)
                for step, value in breakdown(run_id).items():
                    if value is not None:
                        segments[length].setdefault(step, []).append(value)
                sent[length].add(first_request)
        timed[1] = time.time()
        client.close()

    figures = {
        length: {name: spread(values) for name, values in rows.items()}
        for length, rows in samples.items()
    }
    base = min(figures[length]["overhead"]["p50"] for length in lengths)
    print(
        f"\nA two-pass turn's own overhead by stored messages (ms; {args.rounds} turns each; "
        "production stack, model at once)"
    )
    header = f"{'stored':>7}{'sent':>6}{'run p50':>9}{'model':>7}{'tool':>6}"
    header += f"{'overhead p50':>14}{'p25-p75':>15}{'p95':>7}{'mean':>7}{'max':>7}{'vs least':>10}"
    header += f"{'POST ovh p50':>14}"
    print(header + f"{'bare turn p50':>15}")
    for length in lengths:
        row = figures[length]
        overhead = row["overhead"]
        middle = f"{overhead['p25']:.1f}-{overhead['p75']:.1f}"
        print(
            f"{length:>7}{'/'.join(map(str, sorted(sent[length]))):>6}{row['run']['p50']:>9.1f}"
            f"{row['model']['p50']:>7.1f}{row['tool']['p50']:>6.1f}{overhead['p50']:>14.1f}"
            f"{middle:>15}{overhead['p95']:>7.1f}{overhead['mean']:>7.1f}{overhead['max']:>7.1f}"
            f"{overhead['p50'] / base - 1:>+10.1%}"
            f"{row['post overhead']['p50']:>14.1f}{percentile(bare[length], 0.5):>15.1f}"
        )
    worst = max(figures[length]["overhead"]["p50"] for length in lengths) / base - 1
    flat = worst <= FLAT_WITHIN
    print(
        f"flat within {FLAT_WITHIN:.0%}: {'yes' if flat else 'NO'} (the largest p50 is "
        f"{worst:+.1%} over the smallest); sent: messages in the first model request "
        "(TOOLCHAT_HISTORY_MAX_MESSAGES trims the history)"
    )
    # Past the budget every turn sends as many messages: what is left to grow is the
    # stored history itself.
    steps = {
        f"{shorter} -> {longer}": figures[longer]["overhead"]["p50"]
        / figures[shorter]["overhead"]["p50"]
        - 1
        for shorter, longer in itertools.pairwise(lengths)
    }
    print(
        "p50 overhead from one length to the next: "
        + ", ".join(f"{step} {change:+.1%}" for step, change in steps.items())
    )
    print("\nthe run's segments, p50 ms, by stored messages")
    steps = list(segments[lengths[0]])
    print(f"{'segment':<48}" + "".join(f"{length:>9}" for length in lengths))
    for step in steps:
        values = [percentile(segments[length].get(step, []), 0.5) for length in lengths]
        print(f"{step:<48}" + "".join(f"{value:>9.1f}" for value in values))
    passes = collector_passes(probe_log, *timed) if probe_log is not None else None
    if passes is not None:
        print("\nthe servers' full collector passes during the timed rounds")
        print(f"{'process':<16}{'frozen':>9}{'passes':>8}{'ms':>9}{'longest ms':>12}")
        for name, row in sorted(passes.items()):
            print(
                f"{name:<16}{row['frozen']:>9}{row['passes']:>8}{row['ms']:>9.1f}"
                f"{row['longest']:>12.1f}"
            )
        if not passes:
            print("(none)")
    machine["load_average_end"] = os.getloadavg()
    path = write_results(
        "history_flat",
        {
            "lengths": lengths,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "machine": machine,
            "settings": PRODUCTION_ENV,
            "flat_within": FLAT_WITHIN,
            "flat": flat,
            "largest_over_smallest": worst,
            "length_to_length": steps,
            "messages_sent_first_call": {n: sorted(v) for n, v in sent.items()},
            "figures_ms": figures,
            "segments_p50_ms": {
                n: {step: percentile(v, 0.5) for step, v in rows.items()}
                for n, rows in segments.items()
            },
            "samples_ms": samples,
            "bare_two_pass_ms": {n: spread(v) for n, v in bare.items()},
            "bare_samples_ms": bare,
            "collector_passes": passes,
        },
    )
    print(f"written to {path}")


if __name__ == "__main__":
    main()
