"""Where a turn's first token goes: every step of a WebSocket turn, timed from the client's send.

Starts the production stack (uvicorn, one Celery worker, PostgreSQL, Redis)
or, with `--embedded`, the embedded default (uvicorn, SQLite, in-process
runs), each process with bench/timeline/ on its PYTHONPATH: its probe wraps
the engine's steps, the live events' sends, the consumer's sends and every
SQL statement, and logs each entry and exit (bench/timeline/timeline_probe.py).
Then it posts `--turns` two-pass turns on WebSockets, each on a fresh
conversation, after `--warmup` untimed ones, and prints, for every step seen
in most turns, its median time from the send (and the gap from the line
before): the table of docs/performance.md's round eight.

    .venv/bin/python bench/turn_timeline.py [--turns 20] [--embedded] [--statements]

The probe adds its own cost to every step it wraps (a few milliseconds a
turn): compare steps with each other, and the first token with compare.py.
Writes bench/results/turn_timeline.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bare_loop import turn_content
from compare import PRODUCTION_ENV, Client, production_token, running_embedded
from stack import BENCH_ENV, running_stack, stepping_responder, write_results

PROBE = Path(__file__).resolve().parent / "timeline"


def probe_installed(log: Path, programs: list[str], timeout: float = 30.0) -> None:
    """Wait for the probe in the servers (not in `migrate` and the like, which also load it)."""
    deadline = time.monotonic() + timeout
    while not all(f"probe installed {program}" in log.read_text() for program in programs):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the probe was not installed in {', '.join(programs)}")
        time.sleep(0.1)


def socket_turns(client: Client, log: Path, count: int) -> None:
    from websockets.sync.client import connect

    headers = {"Authorization": f"Token {client.token}"}
    with log.open("a", buffering=1) as marks:
        for _ in range(count):
            conversation = client.conversation("two_pass")
            url = f"{client.ws}/ws/conversations/{conversation}/?after=0"
            with connect(url, additional_headers=headers, open_timeout=10) as socket:
                time.sleep(0.05)  # the socket's own start is not the turn's
                marks.write(f"{time.time():.6f} client SEND\n")
                socket.send(json.dumps({"type": "message", "content": turn_content(1)}))
                first = True
                while True:
                    message = json.loads(socket.recv(timeout=30))
                    kind = message.get("type")
                    if kind == "message.delta" and first and message["data"].get("text"):
                        marks.write(f"{time.time():.6f} client FIRST DELTA RECEIVED\n")
                        first = False
                    if kind in {"run.completed", "run.failed", "run.cancelled"}:
                        marks.write(f"{time.time():.6f} client END {kind}\n")
                        break
            time.sleep(0.1)


def timeline(log: Path, warmup: int, statements: bool) -> list[dict[str, Any]]:
    """Each label's median ms from the client's send, in the turns that had it (most of them)."""
    lines = []
    for raw in log.read_text().splitlines():
        stamp, _, label = raw.split(" ", 2)
        lines.append((float(stamp), label))
    lines.sort()
    sends = [i for i, (_, label) in enumerate(lines) if label == "SEND"][warmup:]
    ends = [i for i, (_, label) in enumerate(lines) if label.startswith("END ")][warmup:]
    seen: dict[tuple[str, int], list[float]] = collections.defaultdict(list)
    for start, end in zip(sends, ends, strict=True):
        counts: collections.Counter[str] = collections.Counter()
        for stamp, label in lines[start + 1 : end + 1]:
            if label.startswith("probe installed") or (not statements and label == "< SQL"):
                continue
            counts[label] += 1
            seen[(label, counts[label])].append((stamp - lines[start][0]) * 1000)
    rows = [
        {"step": label, "occurrence": n, "ms": statistics.median(values), "turns": len(values)}
        for (label, n), values in seen.items()
        if len(values) >= len(sends) / 2
    ]
    return sorted(rows, key=lambda row: row["ms"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--embedded", action="store_true", help="the embedded default")
    parser.add_argument("--statements", action="store_true", help="each statement's end too")
    args = parser.parse_args()

    log = Path(tempfile.mkdtemp(prefix="toolchat-timeline-")) / "timeline.log"
    log.touch()
    path = os.pathsep.join(filter(None, [str(PROBE), os.environ.get("PYTHONPATH")]))
    probe_env = {"PYTHONPATH": path, "TOOLCHAT_TIMELINE_LOG": str(log)}
    turns = args.warmup + args.turns
    if args.embedded:
        from tests.llm_server import ScriptedLLMServer

        os.environ.update(probe_env)
        llm = ScriptedLLMServer(responder=stepping_responder())
        llm.start()
        try:
            with running_embedded(llm) as server:
                logging.disable(logging.INFO)
                probe_installed(log, ["uvicorn"])
                socket_turns(Client("embedded", server, server["token"]), log, turns)
        finally:
            llm.stop()
        variant = "embedded"
    else:
        extra = {**BENCH_ENV, **PRODUCTION_ENV, **probe_env}
        with running_stack(responder=stepping_responder(), workers=1, extra_env=extra) as stack:
            logging.disable(logging.INFO)
            probe_installed(log, ["uvicorn", "celery"])
            server = {"http": stack["http"], "ws": stack["ws"]}
            socket_turns(Client("production", server, production_token()), log, turns)
        variant = "production"
    rows = timeline(log, args.warmup, args.statements)
    print(f"{variant}: {args.turns} WebSocket turns, median ms from the client's send")
    previous = 0.0
    for row in rows:
        gap = row["ms"] - previous
        print(f"{row['ms']:8.2f}  (+{gap:5.2f})  {row['step']} #{row['occurrence']}")
        previous = row["ms"]
    path = write_results("turn_timeline", {"variant": variant, "turns": args.turns, "steps": rows})
    print(f"written to {path}")


if __name__ == "__main__":
    main()
