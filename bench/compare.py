"""`make bench`: toolchat beside the bare loop, interleaved, in one table.

In one run, with one scripted OpenAI-compatible model on loopback that answers
at once (zero latency), this starts:

- the bare loop (bench/bare_loop.py): the same `openai` SDK calls to the same
  server and the same calculator function, nothing stored;
- the embedded default as `make run` serves it: uvicorn with
  project.settings.base, DJANGO_DEBUG=1, SQLite, no REDIS_URL (runs in
  in-process threads, in-memory channel layer);
- the production stack (bench/stack.py): uvicorn with project.settings.base and
  DJANGO_DEBUG=0, PostgreSQL, Redis, one Celery worker.

Both servers use the openai provider pointed at the scripted model and
BENCH_ENV (the message throttle raised). Each round runs one turn of every
kind on every variant, in an order rotated from round to round, so that
whatever the machine does meanwhile (another process, thermal drift) falls on
all of them alike:

- a two-pass turn (model with tools -> one calculator call -> answer without
  tools): `POST /api/v1/conversations/{id}/messages/?wait=true` on a fresh
  conversation until the 200, against one bare turn;
- a loop turn (mode `loop`, the model calls the calculator twice, then
  answers): the same POST, against a bare loop making the same three calls;
  the extra step is the loop turn minus the two-pass turn of the same round;
- time to first token: `{"type": "message"}` sent on a WebSocket open on a
  fresh conversation, until the first `message.delta` with text, against the
  bare loop's time from the start of its turn to the first text chunk of its
  answer call.

Then, with the servers stopped: bench/queries_per_turn.py at history lengths
10 and 10,000 (SQL queries of one two-pass turn), and with `--concurrent`
bench/concurrent_turns.py (200 turns at once, a 500 ms model; slow).

    .venv/bin/python bench/compare.py [--turns 40] [--quick] [--concurrent]

Prints one table and writes bench/results/compare.json.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import logging
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bare_loop import bare_turn, make_client, offered_tools, turn_content
from stack import (
    BENCH_ENV,
    ROOT,
    ScriptedLLMServer,
    _model_env,
    percentile,
    running_stack,
    stepping_responder,
    write_results,
)

from tests.plugins.servers import AsgiServer, server_environment

# The production stack's settings: what docker-compose.yml sets, on plain HTTP.
PRODUCTION_ENV = {
    "DJANGO_SETTINGS_MODULE": "project.settings.base",
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": "bench-secret-key-not-for-production-0123456789abcdefghij",
    "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
    "DJANGO_SECURE_SSL_REDIRECT": "0",
}
# `make run`'s: DJANGO_DEBUG=1 and the defaults. The empty values undo what
# PRODUCTION_ENV put in this process's environment (an empty setting is unset).
EMBEDDED_ENV = {
    "DJANGO_SETTINGS_MODULE": "project.settings.base",
    "DJANGO_DEBUG": "1",
    "DJANGO_SECRET_KEY": "",
    "DJANGO_ALLOWED_HOSTS": "",
    "DJANGO_SECURE_SSL_REDIRECT": "",
}
CREATE_TOKEN = (
    "from django.contrib.auth import get_user_model; "
    "from rest_framework.authtoken.models import Token; "
    "user = get_user_model().objects.create_user('bench', password='bench-password-1'); "
    "print(Token.objects.create(user=user).key)"
)
# django-ai-assistant's virtualenv (bench/peer/README.md); without it, no peer row.
PEER_PYTHON = ROOT / "bench" / ".peer-venv" / "bin" / "python"
LOOP_STEPS = 2  # calculator calls of the loop turn
TURN_TIMEOUT_S = 30

# Budgets of DESIGN.md section 9.
BUDGET_EMBEDDED = 3.0
BUDGET_PRODUCTION = 4.0
BUDGET_FIRST_TOKEN_MS = 10.0
BUDGET_QUERIES = 30
BUDGET_CONCURRENT = 1.5


# --- the two servers ---------------------------------------------------------------------


@contextlib.contextmanager
def running_embedded(llm: ScriptedLLMServer) -> Iterator[dict[str, Any]]:
    """The embedded default on a fresh SQLite file: migrated, one user with a token, uvicorn."""
    folder = Path(tempfile.mkdtemp(prefix="toolchat-bench-embedded-"))
    env = {
        **_model_env(llm),
        **BENCH_ENV,
        **EMBEDDED_ENV,
        "DATABASE_URL": f"sqlite:///{folder / 'db.sqlite3'}",
        "DJANGO_STATIC_ROOT": str(folder / "static"),
    }
    manage = [sys.executable, "manage.py"]
    full_env = server_environment(**env)  # never this process's REDIS_URL
    subprocess.run(
        [*manage, "migrate", "--noinput"], cwd=ROOT, env=full_env, check=True, capture_output=True
    )
    created = subprocess.run(
        [*manage, "shell", "-c", CREATE_TOKEN],
        cwd=ROOT,
        env=full_env,
        check=True,
        capture_output=True,
        text=True,
    )
    server = AsgiServer(env=env, log_path=folder / "uvicorn.log")
    server.start()
    try:
        yield {
            "http": server.base_url,
            "ws": server.base_url.replace("http", "ws", 1),
            "token": created.stdout.split()[-1],
            # For gateway.py: the server's pid (its CPU) and the environment of its manage.py.
            "pid": server.process.pid if server.process else None,
            "env": full_env,
        }
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def production_token() -> str:
    """A user and a token on the production stack (this process's Django is set up on it)."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    user = get_user_model().objects.create_user("bench", password="bench-password-1")
    return str(Token.objects.create(user=user).key)


class Client:
    """One app server as a REST and WebSocket client, with one kept-alive HTTP connection."""

    def __init__(self, name: str, server: dict[str, Any], token: str) -> None:
        self.name = name
        self.ws = server["ws"]
        self.token = token
        address = urlsplit(server["http"])
        self.connection = http.client.HTTPConnection(
            address.hostname, address.port, timeout=TURN_TIMEOUT_S + 30
        )
        self.headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        self.run_ids: dict[str, list[str]] = {}

    def request(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        self.connection.request(method, path, body=json.dumps(body), headers=self.headers)
        response = self.connection.getresponse()
        return response.status, json.loads(response.read())

    def conversation(self, mode: str) -> str:
        """A fresh conversation (untimed)."""
        status, payload = self.request(
            "POST", "/api/v1/conversations/", {"title": "bench", "mode": mode}
        )
        if status != 201:
            raise RuntimeError(f"{self.name}: creating a conversation answered {status}: {payload}")
        return str(payload["id"])

    def post_turn(self, mode: str, content: str, answer: str) -> float:
        """One turn on a fresh conversation: ms from the POST to its 200."""
        conversation_id = self.conversation(mode)
        path = (
            f"/api/v1/conversations/{conversation_id}/messages/?wait=true&timeout={TURN_TIMEOUT_S}"
        )
        started = time.perf_counter()
        status, payload = self.request("POST", path, {"content": content})
        elapsed = (time.perf_counter() - started) * 1000
        if status != 200 or payload["run"]["status"] != "completed":
            raise RuntimeError(f"{self.name}: the turn did not complete: {status} {payload}")
        if payload["message"]["content"] != answer:
            raise RuntimeError(f"{self.name}: unexpected answer {payload['message']!r}")
        self.run_ids.setdefault(mode, []).append(payload["run"]["id"])
        return elapsed

    def socket_turn(self, content: str) -> tuple[float, float]:
        """A turn posted on a WebSocket: ms to the first text delta, and to run.completed."""
        from websockets.sync.client import connect

        conversation_id = self.conversation("two_pass")
        url = f"{self.ws}/ws/conversations/{conversation_id}/?after=0"
        headers = {"Authorization": f"Token {self.token}"}
        first: float | None = None
        with connect(url, additional_headers=headers, open_timeout=10) as socket:
            started = time.perf_counter()
            socket.send(json.dumps({"type": "message", "content": content}))
            while True:
                message = json.loads(socket.recv(timeout=TURN_TIMEOUT_S))
                kind = message.get("type")
                if kind == "message.delta" and first is None and message["data"].get("text"):
                    first = (time.perf_counter() - started) * 1000
                elif kind == "run.completed":
                    total = (time.perf_counter() - started) * 1000
                    break
                elif kind in {"error", "run.failed", "run.cancelled"}:
                    raise RuntimeError(f"{self.name}: WebSocket turn failed: {message}")
        if first is None:
            raise RuntimeError(f"{self.name}: the run completed without a message.delta")
        return first, total


# bench/peer/assistant.py's model name.
PEER_MODEL = "bench-peer-model"


class Peer:
    """django-ai-assistant's turn, in-process in its own virtualenv (bench/peer/), over a pipe."""

    def __init__(self, llm: ScriptedLLMServer) -> None:
        self.process = subprocess.Popen(
            [str(PEER_PYTHON), str(ROOT / "bench" / "peer" / "turns.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PEER_LLM_URL": llm.base_url},
        )
        self._read()  # {"ready": true}, once migrated

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the peer exited ({self.process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def turn(self, content: str, answer: str) -> float:
        """One turn on a new thread: ms of `assistant.run`."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"turn {content}\n")
        self.process.stdin.flush()
        done = self._read()
        if done.get("answer") != answer:
            raise RuntimeError(f"peer: unexpected answer {done!r}")
        return float(done["ms"])

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(30)


# --- the rounds --------------------------------------------------------------------------


def run_rounds(
    *,
    rounds: int,
    warmup: int,
    llm: ScriptedLLMServer,
    apps: list[Client],
    peer: Peer | None = None,
) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Every kind of turn on every variant, `rounds` times, in a rotating order."""
    client = make_client(llm.base_url)
    tools = offered_tools()
    two_pass, loop = turn_content(1), turn_content(LOOP_STEPS)
    probe = bare_turn(client, tools=tools, content=two_pass)
    answer = probe.answer
    samples: dict[str, list[float]] = {}
    bare_steps: dict[str, list[float]] = {}

    def record(key: str, value: float) -> None:
        samples.setdefault(key, []).append(value)

    def bare(mode: str) -> Callable[[], None]:
        def trial() -> None:
            content = two_pass if mode == "two_pass" else loop
            turn = bare_turn(client, tools=tools, content=content, mode=mode)
            if turn.answer != answer:
                raise RuntimeError(f"bare loop: unexpected answer {turn.answer!r}")
            record(f"{mode}/bare", turn.total_ms)
            if mode == "two_pass" and turn.first_token_ms is not None:
                record("first_token/bare", turn.first_token_ms)
            for step, value in turn.steps.items():
                bare_steps.setdefault(f"{mode}: {step}", []).append(value)

        return trial

    def app(target: Client, mode: str) -> Callable[[], None]:
        def trial() -> None:
            content = two_pass if mode == "two_pass" else loop
            record(f"{mode}/{target.name}", target.post_turn(mode, content, answer))

        return trial

    def socket(target: Client) -> Callable[[], None]:
        def trial() -> None:
            first, total = target.socket_turn(two_pass)
            record(f"first_token/{target.name}", first)
            record(f"socket_turn/{target.name}", total)

        return trial

    def peer_turn() -> None:
        assert peer is not None
        record("two_pass/peer", peer.turn(two_pass, answer))

    trials = [bare("two_pass")]
    trials += [app(target, "two_pass") for target in apps]
    trials += [peer_turn] if peer is not None else []
    trials += [bare("loop")]
    trials += [app(target, "loop") for target in apps]
    trials += [socket(target) for target in apps]
    for number in range(warmup + rounds):
        if number == warmup:
            samples.clear()
            bare_steps.clear()
            for target in apps:
                target.run_ids.clear()
        shift = number % len(trials)
        for trial in trials[shift:] + trials[:shift]:
            trial()
    # The app and the bare loop share the model server: every request that offered
    # tools should have offered the very same list (the peer offers its own calculator).
    offered = {
        json.dumps(r["tools"], sort_keys=True)
        for r in llm.requests
        if r.get("tools") and r.get("model") != PEER_MODEL
    }
    checks = {
        "answer": answer,
        "tools_offered": [tool["function"]["name"] for tool in tools],
        "same_tools_offered_by_all": len(offered) == 1,
        "tool_lists_offered": sorted(offered),
        "bare_steps_p50_ms": {step: percentile(v, 0.5) for step, v in bare_steps.items()},
    }
    return samples, checks


def production_breakdown(run_ids: list[str]) -> dict[str, float]:
    """Where the production turns' time went (p50 of each segment), from the database."""
    from turn_overhead import breakdown

    segments: dict[str, list[float]] = {}
    for run_id in run_ids:
        for step, value in breakdown(run_id).items():
            if value is not None:
                segments.setdefault(step, []).append(value)
    return {step: percentile(values, 0.5) for step, values in segments.items()}


# --- the benchmarks run as subprocesses ---------------------------------------------------


def run_script(
    script: str, arguments: list[str], env: dict[str, str], timeout: float
) -> dict[str, Any]:
    """Run another benchmark; return its JSON results, or what went wrong."""
    command = [sys.executable, f"bench/{script}.py", *arguments]
    print(f"running {shlex.join(command[1:])} ...", flush=True)
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-2000:]}"}
    name = script
    if script == "concurrent_turns" and "--db-pool" in arguments:
        name = f"concurrent_turns_pool{arguments[arguments.index('--db-pool') + 1]}"
    results = json.loads((ROOT / "bench" / "results" / f"{name}.json").read_text())
    results["seconds"] = time.monotonic() - started
    results["output"] = done.stdout
    return dict(results)


# --- the table ---------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    """What ran the benchmark: enough to tell two results files apart."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gb"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        git = ["git", "--no-optional-locks", "-C", str(ROOT)]
        info["commit"] = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        info["uncommitted_changes"] = bool(changed.strip())
    return info


def stats(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": percentile(values, 0.5), "p95": percentile(values, 0.95)}


def verdict(ok: bool) -> str:
    return "ok" if ok else "OVER"


def build_table(
    samples: dict[str, list[float]],
    names: dict[str, str],
    queries: dict[str, Any] | None,
    concurrent: dict[str, Any] | None,
) -> tuple[list[tuple[str, ...]], dict[str, Any]]:
    """The rows of the table, and the same figures for the JSON."""
    rows: list[tuple[str, ...]] = []
    figures: dict[str, Any] = {}

    def fmt(value: float, digits: int = 1) -> str:
        return f"{value:.{digits}f}"

    budgets = {"embedded": BUDGET_EMBEDDED, "production": BUDGET_PRODUCTION}
    titles = {
        "two_pass": "two-pass turn (1 tool call, 2 model calls): POST ?wait=true -> 200",
        "loop": f"loop turn ({LOOP_STEPS} tool calls, {LOOP_STEPS + 1} model calls): same POST",
    }
    for kind, title in titles.items():
        rows.append((title,))
        bare = stats(samples[f"{kind}/bare"])
        figures[kind] = {"bare": bare}
        rows.append(("  " + names["bare"], str(bare["n"]), fmt(bare["p50"]), fmt(bare["p95"])))
        variants = ("embedded", "production")
        if kind == "two_pass" and f"{kind}/peer" in samples:
            variants = ("peer", *variants)
        for variant in variants:
            row = stats(samples[f"{kind}/{variant}"])
            ratio = row["p50"] / bare["p50"]
            row["ratio_p50_to_bare"] = ratio
            cells = ["  " + names[variant], str(row["n"]), fmt(row["p50"]), fmt(row["p95"])]
            cells.append(f"{ratio:.1f}x")
            if kind == "two_pass" and variant in budgets:
                row["budget_ratio"] = budgets[variant]
                cells.append(f"<= {budgets[variant]:g}x {verdict(ratio <= budgets[variant])}")
                peer = figures[kind].get("peer")
                if variant == "embedded" and peer is not None:
                    # DESIGN.md: no slower than django-ai-assistant.
                    row["vs_peer_p50"] = row["p50"] / peer["p50"]
                    cells[-1] += f", {row['vs_peer_p50']:.2f}x peer"
            figures[kind][variant] = row
            rows.append(tuple(cells))

    rows.append(("one extra loop step (loop turn - two-pass turn, paired by round)",))
    extra: dict[str, Any] = {}
    for variant in ("bare", "embedded", "production"):
        pairs = [
            loop - two
            for loop, two in zip(
                samples[f"loop/{variant}"], samples[f"two_pass/{variant}"], strict=True
            )
        ]
        extra[variant] = stats(pairs)
    for variant in ("bare", "embedded", "production"):
        row = extra[variant]
        cells = ["  " + names[variant], str(row["n"]), fmt(row["p50"]), fmt(row["p95"])]
        if variant != "bare":
            row["ratio_p50_to_bare"] = row["p50"] / extra["bare"]["p50"]
            cells.append(f"{row['ratio_p50_to_bare']:.1f}x")
        rows.append(tuple(cells))
    figures["extra_loop_step"] = extra

    rows.append(("time to first token: bare answer call's first text / WebSocket message.delta",))
    bare = stats(samples["first_token/bare"])
    figures["first_token"] = {"bare": bare}
    rows.append(("  " + names["bare"], str(bare["n"]), fmt(bare["p50"]), fmt(bare["p95"])))
    for variant in ("embedded", "production"):
        row = stats(samples[f"first_token/{variant}"])
        row["difference_p50_ms"] = difference = row["p50"] - bare["p50"]
        row["socket_turn"] = stats(samples[f"socket_turn/{variant}"])
        ok = difference <= BUDGET_FIRST_TOKEN_MS
        rows.append(
            (
                "  " + names[variant],
                str(row["n"]),
                fmt(row["p50"]),
                fmt(row["p95"]),
                f"{difference:+.1f} ms",
                f"<= +{BUDGET_FIRST_TOKEN_MS:g} ms {verdict(ok)}",
            )
        )
        figures["first_token"][variant] = row

    if queries is not None:
        rows.append(("SQL queries of one two-pass turn (PostgreSQL, inline), by history length",))
        if "error" in queries:
            rows.append((f"  failed: {queries['error'][:80]}",))
        for length in queries.get("lengths", []):
            counts = length["queries"]
            top = max(counts)
            rows.append(
                (
                    f"  {length['history']:,} prior messages: queries",
                    str(length["turns"]),
                    "/".join(map(str, counts)),
                    "",
                    "",
                    f"<= {BUDGET_QUERIES} {verdict(top <= BUDGET_QUERIES)}",
                )
            )
        figures["queries_per_turn"] = {
            key: value for key, value in queries.items() if key != "output"
        }

    if concurrent is not None:
        if "error" in concurrent:
            rows.append(("concurrent turns",))
            rows.append((f"  failed: {concurrent['error'][:80]}",))
        else:
            summary = concurrent["summary"]
            rows.append(
                (
                    f"{concurrent['turns']} concurrent two-pass turns, model {concurrent['delay_s']:g} s "
                    f"per call, {concurrent['workers']} workers x {concurrent['concurrency']} threads",
                )
            )
            one = summary["one turn alone, p50 of 3 (s)"]
            ratio = concurrent["wall_s"] / one
            rows.append(
                (
                    "  wall time of all turns (ms)",
                    str(concurrent["turns"]),
                    fmt(concurrent["wall_s"] * 1000, 0),
                    "",
                    f"{ratio:.1f}x one turn",
                    f"<= {BUDGET_CONCURRENT:g}x {verdict(ratio <= BUDGET_CONCURRENT)}",
                )
            )
            rows.append(("  one turn alone (ms)", "3", fmt(one * 1000, 0)))
            rows.append(
                (
                    "  turn latency (ms)",
                    str(len(concurrent["latencies_s"])),
                    fmt(summary["turn latency p50 (s)"] * 1000, 0),
                    fmt(summary["turn latency p95 (s)"] * 1000, 0),
                )
            )
            rows.append(("  slowest turn (ms)", "", fmt(summary["turn latency max (s)"] * 1000, 0)))
            rows.append(("  errors (turns that did not complete)", "", str(concurrent["errors"])))
            rows.append(
                (
                    "  completed, but answered only at the wait timeout",
                    "",
                    str(concurrent["answered_at_wait_timeout"]),
                )
            )
            rows.append(
                (
                    "  PostgreSQL connections, peak (pg_stat_activity)",
                    "",
                    str(concurrent["postgres_connections_peak"]),
                )
            )
        figures["concurrent"] = {
            key: value for key, value in concurrent.items() if key not in {"output", "latencies_s"}
        }
    return rows, figures


def print_table(title: str, rows: list[tuple[str, ...]]) -> None:
    header = ("(times in ms)", "n", "p50", "p95", "vs bare (p50)", "budget")
    widths = (58, 5, 9, 9, 16, 31)
    print(title)
    print(
        "".join(
            f"{cell:<{w}}" if i == 0 else f"{cell:>{w}}"
            for i, (cell, w) in enumerate(zip(header, widths, strict=True))
        )
    )
    for row in rows:
        if len(row) == 1:
            print(row[0])
            continue
        cells = list(row) + [""] * (len(header) - len(row))
        line = f"{cells[0]:<{widths[0]}}"
        line += "".join(f"{cell:>{w}}" for cell, w in zip(cells[1:], widths[1:], strict=True))
        print(line.rstrip())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=40, help="timed rounds (turns of each kind)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds first")
    parser.add_argument("--quick", action="store_true", help="a short run: 8 rounds, 1 warm-up")
    parser.add_argument(
        "--no-queries", action="store_true", help="skip the SQL query count (queries_per_turn.py)"
    )
    parser.add_argument(
        "--no-peer", action="store_true", help="skip django-ai-assistant even if it is installed"
    )
    parser.add_argument(
        "--concurrent",
        action="store_true",
        help="also run concurrent_turns.py --turns 200 --delay 0.5 (slow)",
    )
    parser.add_argument(
        "--concurrent-args",
        default="--turns 200 --delay 0.5",
        help="the arguments of concurrent_turns.py (default: %(default)s)",
    )
    args = parser.parse_args()
    if args.quick:
        args.turns, args.warmup = min(args.turns, 8), min(args.warmup, 1)

    started = time.monotonic()
    machine = machine_info()
    clean_environ = dict(os.environ)  # for the subprocess benchmarks
    names = {
        "bare": "bare loop (openai SDK, nothing stored)",
        "embedded": "embedded default (uvicorn, SQLite, in-process)",
        "production": "production (uvicorn, Celery, Redis, PostgreSQL)",
        "peer": "django-ai-assistant 0.4 (in-process, SQLite)",
    }
    if not args.no_peer and not PEER_PYTHON.exists():
        print("no django-ai-assistant row: make bench-peer installs it (bench/peer/README.md)")
    print(f"starting the production stack and the embedded default ({machine['cpus']} CPUs) ...")
    with running_stack(
        responder=stepping_responder(), workers=1, extra_env={**BENCH_ENV, **PRODUCTION_ENV}
    ) as stack:
        # Django's logging config (INFO to the console) would print every request the
        # bare loop's SDK makes, and time it too.
        logging.disable(logging.INFO)
        llm: ScriptedLLMServer = stack["llm"]
        production = Client(
            "production", {"http": stack["http"], "ws": stack["ws"]}, production_token()
        )
        with running_embedded(llm) as embedded_server:
            embedded = Client("embedded", embedded_server, embedded_server["token"])
            print(
                f"running {args.warmup} + {args.turns} rounds "
                f"(started in {time.monotonic() - started:.0f} s) ...",
                flush=True,
            )
            peer = Peer(llm) if PEER_PYTHON.exists() and not args.no_peer else None
            rounds_started = time.monotonic()
            try:
                samples, checks = run_rounds(
                    rounds=args.turns,
                    warmup=args.warmup,
                    llm=llm,
                    apps=[embedded, production],
                    peer=peer,
                )
            finally:
                if peer is not None:
                    peer.stop()
            rounds_s = time.monotonic() - rounds_started
        checks["production_breakdown_p50_ms"] = production_breakdown(
            production.run_ids.get("two_pass", [])
        )
    if not checks["same_tools_offered_by_all"]:
        print("warning: the app and the bare loop did not offer the model the same tools:")
        for listed in checks["tool_lists_offered"]:
            print("  ", [tool["function"]["name"] for tool in json.loads(listed)])

    queries = None
    if not args.no_queries:
        repeat = "1" if args.quick else "3"
        queries = run_script(
            "queries_per_turn", ["--lengths", "10,10000", "--repeat", repeat], clean_environ, 400
        )
    concurrent = None
    if args.concurrent:
        concurrent = run_script(
            "concurrent_turns", shlex.split(args.concurrent_args), clean_environ, 900
        )

    rows, figures = build_table(samples, names, queries, concurrent)
    machine["load_average_end"] = os.getloadavg()
    print()
    print_table(
        f"toolchat vs the bare loop: {args.turns} interleaved rounds (+{args.warmup} warm-up), "
        f"zero-latency scripted model, {machine['cpus']} CPUs, load {machine['load_average'][0]:.1f}",
        rows,
    )
    steps = ", ".join(
        f"{step.split(': ', 1)[1]} {value:.1f}"
        for step, value in checks["bare_steps_p50_ms"].items()
        if step.startswith("two_pass")
    )
    print(f"bare two-pass turn, p50 ms per step: {steps}")
    print("production two-pass turn, where the time goes (p50 ms, from the database):")
    for step, value in checks["production_breakdown_p50_ms"].items():
        print(f"  {step:<56}{value:>9.1f}")
    path = write_results(
        "compare",
        {
            "rounds": args.turns,
            "warmup": args.warmup,
            "seconds": time.monotonic() - started,
            "rounds_seconds": rounds_s,
            "machine": machine,
            "variants": names,
            "settings": {"embedded": EMBEDDED_ENV, "production": PRODUCTION_ENV},
            "figures": figures,
            "checks": checks,
            "samples_ms": samples,
        },
    )
    print(f"written to {path} ({time.monotonic() - started:.0f} s in all)")


if __name__ == "__main__":
    main()
