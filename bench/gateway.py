"""The latency toolchat adds to a model call, beside the LiteLLM proxy, as requests pile up.

What a gateway is judged by (BerriAI's ai-gateway-bench): the latency it adds
per model call, the proxied call less the bare one against the same mock model,
at the median and the tail, with 1, 16 and 64 requests in flight. In one run,
one strict scripted model server (tests/llm_server.py, in a process of its own:
zero latency, then 200 ms before each answer) and these paths to it:

- bare: the openai SDK (`AsyncOpenAI`) straight to the model server;
- litellm: the same request through the LiteLLM proxy (the version
  `.ci/litellm.sh` installs, which this script runs), in front of that server;
- toolchat's `POST /v1/chat/completions`, on the embedded default (as
  `make run` serves it: SQLite, runs in in-process threads) and on the
  production stack (uvicorn, one Celery worker of 50 threads as
  docker-compose.yml runs it, PostgreSQL, Redis): a pass-through turn (the
  user's tool policy denies every tool, so none of toolchat's is offered: one
  model call, stored, audited and streamed), and, apart, a two-pass turn with
  one tool (the model calls the calculator, toolchat runs it, the model answers).

Every request is a new client conversation (a system message of its own).
Each level runs in rounds: in a round every path in turn (the order rotated
from round to round) makes `2 x level` requests from `level` asyncio workers,
so the paths share whatever load the machine has. Streamed and not. For each
path: p50/p95/p99 of the request's time, the added latency (the path's
percentile less the bare one's), the time to the first token streamed, the
requests per second over its rounds, and the CPU each process used while it ran,
per request (web, workers, PostgreSQL, Redis, the proxy, the model, this
client). Then every toolchat turn is read back from its run's events
(`GET /api/v1/runs/{id}/events/`): completed, its events numbered without a gap
or a repeat, the streamed text (or the completion) the stored answer.

    .venv/bin/python bench/gateway.py [--requests 128] [--levels 1,16,64] [--quick]

Prints one table and writes bench/results/gateway.json.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compare import PRODUCTION_ENV, machine_info, running_embedded
from stack import BENCH_ENV, ROOT, percentile, running_stack, write_results

MODEL = "bench-model"
QUESTION = "What is 12*7?"
ANSWER = " ".join(f"word{i}" for i in range(20))
REQUEST_TIMEOUT_S = 120.0
WORKER_THREADS = 50  # docker-compose.yml's CELERY_WORKER_CONCURRENCY

# The goals (issue 49).
GOAL_TWO_PASS_TAIL = 3.0  # p99 at the highest level <= 3x p99 at 1 in flight
GOAL_TTFT_P50_MS = 10.0  # at 1 in flight, over the bare call's
GOAL_TTFT_P99_MS = 50.0  # at the highest level, over the bare call's

# A deny rule for every tool: the pass-through user's turns offer none of toolchat's.
SETUP_USERS = (
    "from django.contrib.auth import get_user_model; "
    "from rest_framework.authtoken.models import Token; "
    "from chat.models import ToolPolicy; "
    "User = get_user_model(); "
    "tool = User.objects.create_user('gateway-tool', password='bench-password-1'); "
    "passing = User.objects.create_user('gateway-pass', password='bench-password-1'); "
    "rule = ToolPolicy.objects.create(tools=['*'], decision='deny', note='pass-through'); "
    "rule.users.add(passing); "
    "print(Token.objects.create(user=tool).key, Token.objects.create(user=passing).key)"
)


# --- the model server, in a process of its own -------------------------------------------


def serve_model() -> None:
    """`gateway.py --model-server`: the scripted model; stdin sets its delay and asks its counts."""
    import socketserver

    sys.path.insert(0, str(ROOT))
    from tests.llm_server import ScriptedLLMServer, text_reply, tool_calls_reply

    # socketserver listens with a backlog of 5: 64 clients connecting at once overflowed
    # it, and the SYNs it dropped came back a second later (or as connection errors).
    socketserver.TCPServer.request_queue_size = 1024

    delay = {"s": 0.0}

    def respond(body: dict[str, Any]) -> Any:
        last = body["messages"][-1]
        if body.get("tools") and last["role"] == "user":
            call = [("calculator", json.dumps({"expression": "12*7"}))]
            return tool_calls_reply(call, delay_s=delay["s"])
        return text_reply(ANSWER, delay_s=delay["s"])

    server = ScriptedLLMServer(responder=respond).start()
    print(server.base_url, flush=True)
    for line in sys.stdin:
        command, _, value = line.strip().partition(" ")
        if command == "delay":
            delay["s"] = float(value)
            print("ok", flush=True)
        elif command == "counts":
            with server._lock:
                counts = {"requests": len(server.requests), "rejected": len(server.rejected)}
                problems = [problem for _, problem in server.rejected[:3]]
                server.requests.clear()
                server.request_headers.clear()
            print(json.dumps({**counts, "problems": problems}), flush=True)
    server.stop()


class ModelProcess:
    """The model server's process: its URL, its delay, its request counts."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--model-server"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.base_url = self._line()
        self.pid = self.process.pid

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the model server exited ({self.process.wait()})")
        return line.strip()

    def _ask(self, command: str) -> str:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self._line()

    def delay(self, seconds: float) -> None:
        self._ask(f"delay {seconds}")

    def counts(self) -> dict[str, Any]:
        counts: dict[str, Any] = json.loads(self._ask("counts"))
        return counts

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(30)


# --- the LiteLLM proxy -------------------------------------------------------------------


def litellm_python() -> str:
    """The proxy's interpreter: TOOLCHAT_LITELLM_PYTHON, else what `.ci/litellm.sh` installs."""
    python = os.environ.get("TOOLCHAT_LITELLM_PYTHON")
    if python:
        return python
    print("installing or checking the LiteLLM proxy (.ci/litellm.sh) ...", flush=True)
    printed = subprocess.run(
        ["bash", str(ROOT / ".ci" / "litellm.sh")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r"TOOLCHAT_LITELLM_PYTHON=(\S+)", printed)
    if not found:
        raise RuntimeError(f".ci/litellm.sh printed no interpreter: {printed!r}")
    return found.group(1).strip("'\"")


@contextlib.contextmanager
def running_litellm(upstream: str, folder: Path) -> Iterator[dict[str, Any]]:
    """The proxy, configured as tests/plugins/litellm.py does, on a free port."""
    from tests.plugins.litellm import MASTER_KEY, OFFLINE_ENV, START_TIMEOUT_S, proxy_config
    from tests.plugins.services import free_port, wait_for_port

    python = litellm_python()
    config = folder / "litellm.yaml"  # JSON is YAML
    config.write_text(json.dumps(proxy_config(upstream, MODEL), indent=2))
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", str(folder)),
        **OFFLINE_ENV,
        # Its request log off, as a gateway under load would run it.
        "LITELLM_LOG": "ERROR",
    }
    command = [python, "-m", "litellm.proxy.proxy_cli", "--config", str(config)]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    log = folder / "litellm.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=env, cwd=folder
        )
    try:
        wait_for_port(port, START_TIMEOUT_S)
        version = subprocess.run(
            [python, "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        yield {
            "base_url": f"http://127.0.0.1:{port}/v1",
            "key": MASTER_KEY,
            "pid": process.pid,
            "version": version,
        }
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- the paths ---------------------------------------------------------------------------


@dataclass
class Path_:
    """One way to the model: a client, its model id, its headers, and where its turns are kept."""

    name: str
    base_url: str
    key: str
    model: str
    headers: dict[str, str] = field(default_factory=dict)
    app: str = ""  # "embedded" or "production" for toolchat's paths
    api: str = ""  # the app's origin, to read its runs back
    token: str = ""
    client: Any = None


@dataclass
class Sample:
    total_ms: float
    first_token_ms: float | None
    text: str
    run_id: str
    error: str = ""


async def one_request(path: Path_, stream: bool) -> Sample:
    """One chat completion on a new client conversation: its time, first token and text."""
    messages = [
        {"role": "system", "content": f"Session {uuid.uuid4().hex[:12]}."},
        {"role": "user", "content": QUESTION},
    ]
    started = time.perf_counter()
    first: float | None = None
    try:
        raw = await path.client.chat.completions.with_raw_response.create(
            model=path.model, messages=messages, stream=stream, extra_headers=path.headers
        )
        run_id = raw.headers.get("x-toolchat-run-id", "")
        parsed = raw.parse()  # the SDK's legacy raw response: parse() is not awaited
        if stream:
            parts = []
            async for chunk in parsed:
                if chunk.choices and chunk.choices[0].delta.content:
                    if first is None:
                        first = (time.perf_counter() - started) * 1000
                    parts.append(chunk.choices[0].delta.content)
            text = "".join(parts)
        else:
            text = parsed.choices[0].message.content or ""
    except Exception as exc:  # counted, and the run goes on
        elapsed = (time.perf_counter() - started) * 1000
        cause = exc.__cause__ or exc.__context__
        told = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        return Sample(elapsed, None, "", "", f"{type(exc).__name__}: {exc}{told}"[:300])
    elapsed = (time.perf_counter() - started) * 1000
    error = "" if text == ANSWER else f"unexpected answer {text[:80]!r}"
    return Sample(elapsed, first, text, run_id, error)


async def closed_loop(path: Path_, stream: bool, in_flight: int, count: int) -> list[Sample]:
    """`count` requests from `in_flight` workers, each sending its next when its last ends."""
    left = [count]
    samples: list[Sample] = []

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            samples.append(await one_request(path, stream))

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return samples


# --- CPU of each process -----------------------------------------------------------------


def cpu_now(pids: dict[str, int | None]) -> dict[str, float]:
    """CPU seconds so far of each named process and its descendants; this process's own.

    One pass over /proc for all of them (stack.process_cpu reads it once a process).
    """
    parents: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    reaped: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        parents.setdefault(int(fields[1]), []).append(pid)
        cpu[pid] = (int(fields[11]) + int(fields[12])) / tick
        reaped[pid] = (int(fields[13]) + int(fields[14])) / tick
    used: dict[str, float] = {}
    for name, root in pids.items():
        if not root:
            continue
        total, todo = reaped.get(root, 0.0), [root]  # and the children it has reaped
        while todo:
            current = todo.pop()
            total += cpu.get(current, 0.0)
            todo.extend(parents.get(current, []))
        used[name] = total
    own = os.times()
    used["client"] = own.user + own.system
    return used


# Where the production stack's Redis is, for its count of commands (set by main).
REDIS_COUNTED: dict[str, Any] = {}


def redis_commands() -> collections.Counter[str]:
    """Commands the production stack's Redis has run so far, by name (INFO commandstats)."""
    client = REDIS_COUNTED.get("client")
    if client is None:
        return collections.Counter()
    stats = client.info("commandstats")
    return collections.Counter(
        {name.removeprefix("cmdstat_"): int(entry["calls"]) for name, entry in stats.items()}
    )


# --- checks of the stored turns ----------------------------------------------------------


async def stored_problems(path: Path_, samples: list[Sample]) -> list[str]:
    """What the app's stored events say against what its client was sent, turn by turn."""
    import httpx

    problems: list[str] = []
    headers = {"Authorization": f"Token {path.token}"}
    gate = asyncio.Semaphore(8)
    async with httpx.AsyncClient(base_url=path.api, headers=headers, timeout=60) as http:

        async def check(sample: Sample) -> None:
            if sample.error:  # counted as an error already
                return
            if not sample.run_id:
                problems.append("no X-Toolchat-Run-Id")
                return
            events: list[dict[str, Any]] = []
            async with gate:
                after = 0
                while True:
                    answer = await http.get(f"/api/v1/runs/{sample.run_id}/events/?after={after}")
                    if answer.status_code != 200:
                        problems.append(f"{sample.run_id}: events answered {answer.status_code}")
                        return
                    page = answer.json()
                    events += page["events"]
                    after = page["last_seq"]
                    if not page["has_more"]:
                        break
            problem = events_problem(events, sample.text)
            if problem:
                problems.append(f"{sample.run_id}: {problem}")

        await asyncio.gather(*(check(sample) for sample in samples))
    return problems


def events_problem(events: list[dict[str, Any]], text: str) -> str:
    """Why a run's stored events are not one complete turn that answered `text`, or ""."""
    seqs = [event["seq"] for event in events]
    if not seqs:
        return "no events stored"
    if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
        return f"events not numbered one by one: {seqs}"
    kinds = [event["type"] for event in events]
    if "run.started" not in kinds or kinds[-1] != "run.completed":
        return f"not a completed run: {kinds}"
    final = events[-1]["data"]["message_id"]
    deltas = "".join(
        event["data"]["text"]
        for event in events
        if event["type"] == "message.delta" and event["data"]["message_id"] == final
    )
    stored = [
        event["data"]["message"]["content"]
        for event in events
        if event["type"] == "message.completed" and event["data"]["message"]["id"] == final
    ]
    if stored != [text]:
        return f"stored answer {stored!r} is not the one sent {text[:40]!r}"
    if deltas != text:
        return f"the stored deltas {deltas[:40]!r} are not the answer"
    return ""


# --- the run -----------------------------------------------------------------------------


def make_client(path: Path_) -> Any:
    from openai import AsyncOpenAI

    return AsyncOpenAI(
        base_url=path.base_url, api_key=path.key, timeout=REQUEST_TIMEOUT_S, max_retries=0
    )


async def run_cell(
    paths: list[Path_],
    pids: dict[str, int | None],
    *,
    stream: bool,
    in_flight: int,
    rounds: int,
    per_round: int,
) -> dict[str, dict[str, Any]]:
    """One level, streamed or not: every path, round by round in a rotated order."""
    results: dict[str, dict[str, Any]] = {
        path.name: {"samples": [], "wall_s": 0.0, "cpu_s": {}, "redis": collections.Counter()}
        for path in paths
    }
    for number in range(rounds):
        shift = number % len(paths)
        for path in paths[shift:] + paths[:shift]:
            before, commands = cpu_now(pids), redis_commands()
            started = time.perf_counter()
            samples = await closed_loop(path, stream, in_flight, per_round)
            wall = time.perf_counter() - started
            after = cpu_now(pids)
            result = results[path.name]
            # Less the first reading's own INFO, which the second counts.
            result["redis"] += redis_commands() - commands - collections.Counter(info=1)
            result["samples"] += samples
            result["wall_s"] += wall
            for name, value in after.items():
                result["cpu_s"][name] = result["cpu_s"].get(name, 0.0) + value - before[name]
    return results


def summarize(results: dict[str, dict[str, Any]], bare: str = "bare") -> dict[str, dict[str, Any]]:
    """Percentiles of each path, and their differences from the bare path's."""
    figures: dict[str, dict[str, Any]] = {}
    for name, result in results.items():
        samples: list[Sample] = result["samples"]
        good = [s for s in samples if not s.error]
        totals = [s.total_ms for s in good]
        firsts = [s.first_token_ms for s in good if s.first_token_ms is not None]
        row: dict[str, Any] = {
            "n": len(samples),
            "errors": len(samples) - len(good),
            "error_examples": sorted({s.error for s in samples if s.error})[:3],
            "rps": len(samples) / result["wall_s"] if result["wall_s"] else 0.0,
            # Of the production stack's Redis: its broker's, its live events' and its waits'.
            "redis_commands_per_request": sum(result["redis"].values()) / max(1, len(samples)),
            "redis_commands_by_name": {
                name: round(count / max(1, len(samples)), 2)
                for name, count in result["redis"].most_common()
            },
            "cpu_ms_per_request": {
                process: 1000 * seconds / max(1, len(samples))
                for process, seconds in result["cpu_s"].items()
            },
        }
        for label, fraction in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
            row[label] = percentile(totals, fraction)
            row[f"ttft_{label}"] = percentile(firsts, fraction) if firsts else None
        figures[name] = row
    base = figures[bare]
    for row in figures.values():
        for label in ("p50", "p95", "p99"):
            row[f"added_{label}"] = row[label] - base[label]
            if row[f"ttft_{label}"] is not None and base[f"ttft_{label}"] is not None:
                row[f"ttft_added_{label}"] = row[f"ttft_{label}"] - base[f"ttft_{label}"]
    return figures


def gateway_cpu(name: str, cpu: dict[str, float]) -> float:
    """CPU ms a request of the processes that make up this path's gateway."""
    groups = {
        "litellm": ("proxy",),
        "embedded": ("embedded_web",),
        "production": ("web", "worker", "postgres", "redis"),
    }
    for prefix, processes in groups.items():
        if name.startswith(prefix):
            return sum(cpu.get(process, 0.0) for process in processes)
    return 0.0


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_table(title: str, cells: list[dict[str, Any]]) -> None:
    header = (
        "path",
        "n",
        "err",
        "p50",
        "p95",
        "p99",
        "+p50",
        "+p95",
        "+p99",
        "ttft50",
        "ttft99",
        "+tt50",
        "+tt99",
        "req/s",
        "cpu/req",
    )
    widths = (24, 5, 4, 8, 8, 8, 8, 8, 8, 8, 8, 7, 7, 7, 8)
    print(title)
    print(
        "".join(
            f"{h:<{w}}" if i == 0 else f"{h:>{w}}"
            for i, (h, w) in enumerate(zip(header, widths, strict=True))
        )
    )
    for cell in cells:
        kind = "streamed" if cell["stream"] else "not streamed"
        print(f"model {cell['delay_s'] * 1000:g} ms, {kind}, {cell['in_flight']} in flight")
        for name, row in cell["paths"].items():
            values = [
                f"  {name}",
                str(row["n"]),
                str(row["errors"] + row.get("stored_problems", 0)),
                fmt(row["p50"]),
                fmt(row["p95"]),
                fmt(row["p99"]),
                *(
                    ("", "", "")
                    if name == "bare"
                    else (fmt(row[f"added_{p}"]) for p in ("p50", "p95", "p99"))
                ),
                fmt(row["ttft_p50"]),
                fmt(row["ttft_p99"]),
                "" if name == "bare" else fmt(row.get("ttft_added_p50")),
                "" if name == "bare" else fmt(row.get("ttft_added_p99")),
                fmt(row["rps"], 0),
                fmt(gateway_cpu(name, row["cpu_ms_per_request"])),
            ]
            print(
                "".join(
                    f"{v:<{w}}" if i == 0 else f"{v:>{w}}"
                    for i, (v, w) in enumerate(zip(values, widths, strict=True))
                )
            )


def goals(cells: list[dict[str, Any]], levels: list[int]) -> list[dict[str, Any]]:
    """Each of the issue's goals, cell by cell: the figure, its bound, met or not."""
    checks: list[dict[str, Any]] = []
    low, high = min(levels), max(levels)

    def where(cell: dict[str, Any]) -> str:
        kind = "streamed" if cell["stream"] else "not streamed"
        return f"{cell['delay_s'] * 1000:g} ms, {kind}, {cell['in_flight']} in flight"

    for cell in cells:
        rows = cell["paths"]
        for app in ("embedded", "production"):
            mine = rows.get(f"{app}-pass")
            if mine is None or "litellm" not in rows:
                continue
            for label in ("p50", "p99"):
                theirs = rows["litellm"][f"added_{label}"]
                checks.append(
                    {
                        "goal": f"pass-through added {label} <= LiteLLM's ({app})",
                        "where": where(cell),
                        "value": mine[f"added_{label}"],
                        "bound": theirs,
                        "met": mine[f"added_{label}"] <= theirs,
                    }
                )
            if cell["stream"] and cell["in_flight"] in (low, high):
                label, bound = (
                    ("p50", GOAL_TTFT_P50_MS)
                    if cell["in_flight"] == low
                    else ("p99", GOAL_TTFT_P99_MS)
                )
                value = mine.get(f"ttft_added_{label}")
                checks.append(
                    {
                        "goal": f"first token {label} <= bare + {bound:g} ms ({app})",
                        "where": where(cell),
                        "value": value,
                        "bound": bound,
                        "met": value is not None and value <= bound,
                    }
                )
    by_key = {(c["delay_s"], c["stream"], c["in_flight"]): c for c in cells}
    for (delay, stream, in_flight), cell in by_key.items():
        if in_flight != high or (delay, stream, low) not in by_key or low == high:
            continue
        for app in ("embedded", "production"):
            name = f"{app}-tool"
            if name not in cell["paths"]:
                continue
            alone = by_key[delay, stream, low]["paths"][name]["p99"]
            ratio = cell["paths"][name]["p99"] / alone
            checks.append(
                {
                    "goal": f"two-pass p99 at {high} <= {GOAL_TWO_PASS_TAIL:g}x p99 at {low} ({app})",
                    "where": where(cell),
                    "value": ratio,
                    "bound": GOAL_TWO_PASS_TAIL,
                    "met": ratio <= GOAL_TWO_PASS_TAIL,
                }
            )
    for cell in cells:
        # toolchat's turns: the bare call's and the proxy's errors are theirs (the table's `err`).
        lost = sum(
            row["errors"] + row.get("stored_problems", 0)
            for name, row in cell["paths"].items()
            if name.startswith(("embedded-", "production-"))
        )
        checks.append(
            {
                "goal": "no error, every turn stored, events whole and in order",
                "where": where(cell),
                "value": lost,
                "bound": 0,
                "met": lost == 0 and not cell["model_rejected"],
            }
        )
    return checks


def print_redis_commands(cells: list[dict[str, Any]]) -> None:
    """Redis commands a request of the production paths, at each level (streamed / not)."""
    print("\nRedis commands a request, production stack (not streamed / streamed)")
    for name in ("production-pass", "production-tool"):
        row = []
        for cell in cells:
            figures = cell["paths"].get(name)
            if figures is not None and cell["delay_s"] == cells[0]["delay_s"]:
                row.append(
                    f"{cell['in_flight']} in flight {'streamed' if cell['stream'] else 'not'}: "
                    f"{figures['redis_commands_per_request']:.1f}"
                )
        print(f"  {name}: " + ", ".join(row))


def print_goals(checks: list[dict[str, Any]]) -> None:
    print("\ngoals (issue 49)")
    for check in checks:
        value = check["value"]
        shown = (
            "-" if value is None else (f"{value:.2f}" if isinstance(value, float) else str(value))
        )
        bound = check["bound"]
        bound = f"{bound:.2f}" if isinstance(bound, float) else str(bound)
        verdict = "met" if check["met"] else "MISSED"
        print(f"  {verdict:<7}{check['goal']:<56}{check['where']:<36}{shown:>9} vs {bound}")
    met = sum(1 for check in checks if check["met"])
    print(f"  {met} of {len(checks)} met")


def app_paths(name: str, server: dict[str, Any], tokens: tuple[str, str]) -> list[Path_]:
    """toolchat's two paths on one server: the pass-through user's and the tool user's."""
    tool_token, pass_token = tokens
    common = {"base_url": f"{server['http']}/v1", "model": f"openai/{MODEL}", "app": name}
    return [
        Path_(name=f"{name}-pass", key=pass_token, token=pass_token, api=server["http"], **common),
        Path_(
            name=f"{name}-tool",
            key=tool_token,
            token=tool_token,
            api=server["http"],
            headers={"X-Toolchat-Mode": "two_pass"},
            **common,
        ),
    ]


def setup_users(env: dict[str, str]) -> tuple[str, str]:
    made = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", SETUP_USERS],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    tool, passing = made.stdout.split()[-2:]
    return tool, passing


PROFILED = ("web", "worker", "embedded_web")


def profiles_start(
    args: argparse.Namespace, pids: dict[str, int | None], delay: float, in_flight: int
) -> dict[str, tuple[Any, Path]]:
    """With --profile, py-spy on the web processes and the worker through the top level's cells
    at the first model delay (streamed and not, written apart)."""
    from profile_turn import profile_start

    if not args.profile or in_flight != max(args.levels) or delay != args.delays[0]:
        return {}
    spies = {}
    for name in PROFILED:
        pid = pids.get(name)
        if pid:
            folded = ROOT / "bench" / "results" / f"gateway.{name}.folded"
            folded.unlink(missing_ok=True)
            spies[name] = (profile_start(pid, folded), folded)
    return spies


def profiles_stop(spies: dict[str, tuple[Any, Path]], stream: bool) -> None:
    """Stop py-spy, print each process's top entries, keep its stacks by stream mode."""
    from profile_turn import profile_print, profile_stop
    from profile_turn import summarize as profile_summarize

    kind = "streamed" if stream else "unstreamed"
    for name, (spy, folded) in spies.items():
        profile_stop(spy, folded)
        kept = folded.with_name(f"gateway.{name}.{kind}.folded")
        folded.replace(kept)
        profile_print(f"{name}, {kind}", profile_summarize(kept, top=25))


async def run_all(
    args: argparse.Namespace, paths: list[Path_], pids: dict[str, int | None], model: ModelProcess
) -> list[dict[str, Any]]:
    for path in paths:
        path.client = make_client(path)
    # Untimed: connections, imports and the servers' first statements.
    await run_cell(paths, pids, stream=False, in_flight=4, rounds=1, per_round=8)
    await run_cell(paths, pids, stream=True, in_flight=4, rounds=1, per_round=8)
    model.counts()
    cells = []
    for delay in args.delays:
        model.delay(delay)
        for stream in (False, True):
            for in_flight in args.levels:
                per_round = args.per_worker * in_flight
                rounds = max(args.min_rounds, -(-args.requests // per_round))
                load = os.getloadavg()[0]
                print(
                    f"model {delay * 1000:g} ms, {'streamed' if stream else 'not streamed'}, "
                    f"{in_flight} in flight: {rounds} rounds of {per_round} a path "
                    f"(load {load:.1f}) ...",
                    flush=True,
                )
                spies = profiles_start(args, pids, delay, in_flight)
                results = await run_cell(
                    paths,
                    pids,
                    stream=stream,
                    in_flight=in_flight,
                    rounds=rounds,
                    per_round=per_round,
                )
                figures = summarize(results)
                profiles_stop(spies, stream)
                for path in paths:
                    if not path.app:
                        continue
                    problems = await stored_problems(path, results[path.name]["samples"])
                    figures[path.name]["stored_problems"] = len(problems)
                    figures[path.name]["stored_problem_examples"] = problems[:3]
                counts = model.counts()
                cells.append(
                    {
                        "delay_s": delay,
                        "stream": stream,
                        "in_flight": in_flight,
                        "rounds": rounds,
                        "per_round": per_round,
                        "load_average_at_start": load,
                        "model_requests": counts["requests"],
                        "model_rejected": counts["rejected"],
                        "model_problems": counts["problems"],
                        "paths": figures,
                        "samples_ms": {
                            name: [round(s.total_ms, 2) for s in result["samples"]]
                            for name, result in results.items()
                        },
                    }
                )
    for path in paths:
        await path.client.close()
    return cells


def main() -> None:
    if "--model-server" in sys.argv:
        serve_model()
        return
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--requests", type=int, default=128, help="requests a path makes per level (at least)"
    )
    parser.add_argument(
        "--levels", default="1,16,64", help="requests in flight (default: %(default)s)"
    )
    parser.add_argument("--delays", default="0,0.2", help="the model's seconds before each answer")
    parser.add_argument(
        "--per-worker", type=int, default=2, help="requests each worker sends a round"
    )
    parser.add_argument("--min-rounds", type=int, default=2, help="rounds a level at least")
    parser.add_argument(
        "--quick", action="store_true", help="8 requests a level, one a worker a round"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy on the web processes and the worker at the top level (bench/results/*.folded)",
    )
    parser.add_argument("--no-embedded", action="store_true", help="the production stack only")
    args = parser.parse_args()
    args.levels = [int(v) for v in args.levels.split(",")]
    args.delays = [float(v) for v in args.delays.split(",")]
    if args.quick:
        args.requests, args.per_worker, args.min_rounds = 8, 1, 1

    started = time.monotonic()
    machine = machine_info()
    folder = Path(tempfile.mkdtemp(prefix="toolchat-gateway-"))
    model = ModelProcess()
    print(f"model server at {model.base_url}; starting the proxy and the stacks ...", flush=True)
    try:
        with (
            running_litellm(model.base_url, folder) as proxy,
            running_stack(
                workers=1,
                concurrency=WORKER_THREADS,
                extra_env={**BENCH_ENV, **PRODUCTION_ENV, "OPENAI_BASE_URL": model.base_url},
            ) as stack,
        ):
            logging.disable(logging.INFO)
            import redis

            REDIS_COUNTED["client"] = redis.Redis.from_url(stack["env"]["REDIS_URL"])
            production = {"http": stack["http"]}
            paths = [
                Path_(name="bare", base_url=model.base_url, key="sk-bench", model=MODEL),
                Path_(name="litellm", base_url=proxy["base_url"], key=proxy["key"], model=MODEL),
            ]
            pids: dict[str, int | None] = {
                "web": stack["pids"]["web"],
                "worker": stack["pids"]["worker0"],
                "postgres": stack["service_pids"]["postgres"],
                "redis": stack["service_pids"]["redis"],
                "proxy": proxy["pid"],
                "model": model.pid,
            }
            with contextlib.ExitStack() as embedded_stack:
                if not args.no_embedded:
                    embedded = embedded_stack.enter_context(running_embedded(model))  # type: ignore[arg-type]
                    pids["embedded_web"] = embedded["pid"]
                    paths += app_paths("embedded", embedded, setup_users(embedded["env"]))
                paths += app_paths("production", production, setup_users(stack["env"]))
                print(
                    f"ready in {time.monotonic() - started:.0f} s; LiteLLM {proxy['version']}",
                    flush=True,
                )
                cells = asyncio.run(run_all(args, paths, pids, model))
    finally:
        model.stop()
    machine["load_average_end"] = os.getloadavg()
    load = machine["load_average"]
    print()
    print_table(
        f"added latency per model call (ms; +pN: the path's pN less the bare call's), "
        f"{machine['cpus']} CPUs, load {load[0]:.1f} at the start, "
        f"{machine['load_average_end'][0]:.1f} at the end; cpu/req: the gateway's processes, ms",
        cells,
    )
    print_redis_commands(cells)
    checks = goals(cells, args.levels)
    print_goals(checks)
    path = write_results(
        "gateway",
        {
            "seconds": time.monotonic() - started,
            "machine": machine,
            "litellm": proxy["version"],
            "arguments": dict(vars(args)),
            "worker_threads": WORKER_THREADS,
            "cells": cells,
            "goals": checks,
        },
    )
    print(f"written to {path} ({time.monotonic() - started:.0f} s in all)")


if __name__ == "__main__":
    main()
