"""Scale-out: 200 concurrent turns on 1 web + 1 worker, then on 2 web + 2 workers, behind nginx.

One private PostgreSQL and one Redis, and a scripted model that waits
`--delay` seconds (default 0.5) before each of its two answers of a two-pass
turn, serve two configurations in turn, each started afresh for each round:

- (a) one uvicorn (the production settings of docker-compose.yml:
  project.settings.base, DJANGO_DEBUG=0) and one Celery worker (its pool:
  threads, `--concurrency` 50), behind nginx;
- (b) two uvicorns and two workers, the same, behind the same nginx
  configuration with both web processes upstream (round robin).

nginx (Debian's, `apt-get install -y nginx`) runs in the foreground on a free
port with a configuration written to a temporary folder: HTTP/1.1 with kept
connections to the upstreams, WebSocket upgrade for /ws/, and an
`X-Upstream` header naming the web process that answered.

Each configuration gets `--turns` users (default 200), each with a
conversation. Every client first opens a WebSocket on its conversation
(`?after=0`, through nginx), then all post at once (`POST
.../messages/?wait=true`, through nginx, as concurrent_turns.py does), and
each reads its socket until `run.completed`. Measured: turns per second (the
turns over the wall time from the first POST to the last 200), the CPU
seconds of each group of processes from /proc (web, workers, PostgreSQL,
Redis, nginx; this process, which is the clients and the model, apart),
turns per second per core used (turns / CPU seconds of the stack), p50/p95
turn latency, and (b)'s throughput per web + worker pair against (a)'s.
Checked: every event stored for a conversation reached its socket once, in
order, with no gap (seq), wherever the run's worker and the socket's web
process were; and the per-user limits, with one user's requests spread over
the web processes: the message rate (TOOLCHAT_MESSAGE_RATE, 30/min), one
active run per conversation (409), and the sockets per user
(TOOLCHAT_WS_MAX_SOCKETS_PER_USER, 20), each posted one by one and at once to
the web processes directly, in turn.

Throughput per process holds only where each process has a core of its own:
on a machine with fewer cores than (b) has processes, (b) shares (a)'s cores,
and the CPU per turn is the figure that carries over (bench/README.md).

    .venv/bin/python bench/scale_out.py [--turns 200] [--delay 0.5] [--rounds 2] [--concurrency 50]

Prints a table and writes bench/results/scale_out.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

from compare import PRODUCTION_ENV, machine_info
from stack import (
    machine_cpu,
    percentile,
    process_cpu,
    running_services,
    text_reply,
    tool_calls_reply,
    write_results,
)

from tests.plugins.servers import AsgiServer
from tests.plugins.services import free_port, wait_for_port
from tests.stack import CeleryWorker

# The limits of the production defaults that the checks count on.
MESSAGE_RATE = 30  # TOOLCHAT_MESSAGE_RATE: 30/min
SOCKETS_PER_USER = 20  # TOOLCHAT_WS_MAX_SOCKETS_PER_USER
PER_PROCESS_WITHIN = 0.20  # the budget: per-process throughput within 20%
TURN_TIMEOUT_S = 90
NGINX_MISSING = (
    "nginx not found on PATH or in /usr/sbin. scale_out.py puts nginx in front of the "
    "web processes; install it (Debian, Ubuntu: `apt-get install -y nginx`; the service "
    "need not run, the benchmark starts its own in the foreground) and run it again."
)


def find_nginx() -> str:
    """The nginx binary, or SystemExit saying how to install it."""
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    if not found:
        raise SystemExit(NGINX_MISSING)
    return found


class Nginx:
    """nginx in the foreground on a free loopback port, in front of `upstreams`."""

    def __init__(self, binary: str, upstreams: list[int], folder: Path) -> None:
        self.binary = binary
        self.folder = folder
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        folder.mkdir(parents=True, exist_ok=True)
        servers = "\n".join(f"        server 127.0.0.1:{port};" for port in upstreams)
        # A location with a proxy_set_header of its own inherits none: each says them all.
        headers = "\n".join(
            f"            {line}"
            for line in (
                "proxy_http_version 1.1;",
                "proxy_set_header Host $http_host;",
                "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
                "proxy_set_header X-Forwarded-Proto $scheme;",
                "proxy_read_timeout 300s;",
            )
        )
        # Run as root, nginx's workers would switch to `nobody`: keep them this user.
        user = "user root;" if os.geteuid() == 0 else ""
        (folder / "nginx.conf").write_text(
            f"""{user}
daemon off;
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    map $http_upgrade $connection_upgrade {{
        default upgrade;
        '' '';
    }}
    upstream toolchat {{
{servers}
        keepalive 256;
    }}
    server {{
        listen 127.0.0.1:{self.port} backlog=4096;
        add_header X-Upstream $upstream_addr always;
        location /ws/ {{
            proxy_pass http://toolchat;
{headers}
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
        }}
        location / {{
            proxy_pass http://toolchat;
{headers}
            proxy_set_header Connection "";
        }}
    }}
}}
"""
        )

    def start(self) -> Nginx:
        log = (self.folder / "stderr.log").open("wb")
        self.process = subprocess.Popen(
            [self.binary, "-p", str(self.folder), "-c", str(self.folder / "nginx.conf")],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(self.port, 15)
        except TimeoutError:
            self.stop()
            raise RuntimeError(f"nginx did not start:\n{self.log()}") from None
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # a fast shutdown
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def log(self) -> str:
        return "".join(
            path.read_text(errors="replace")[-2000:]
            for path in (self.folder / "stderr.log", self.folder / "error.log")
            if path.exists()
        )


@contextlib.contextmanager
def running_configuration(
    services: dict[str, Any], nginx: str, *, webs: int, workers: int, concurrency: int, name: str
) -> Iterator[dict[str, Any]]:
    """`webs` uvicorns and `workers` Celery workers on the services, nginx in front."""
    env, logs = services["env"], services["logs"] / name
    logs.mkdir(parents=True, exist_ok=True)
    started: list[Any] = []
    try:
        worker_list = []
        for index in range(workers):
            worker = CeleryWorker(
                env=env,
                log_path=logs / f"worker{index}.log",
                name=f"{name}-{index}",
                concurrency=concurrency,
                pool="threads",
            )
            started.append(worker.start())
            worker_list.append(worker)
        web_list = []
        for index in range(webs):
            web = AsgiServer(env=env, log_path=logs / f"web{index}.log")
            web.start()
            started.append(web)
            web_list.append(web)
        proxy = Nginx(nginx, [web.port for web in web_list], logs / "nginx").start()
        started.append(proxy)
        yield {
            "http": f"http://127.0.0.1:{proxy.port}",
            "ws": f"ws://127.0.0.1:{proxy.port}",
            "webs": {f"127.0.0.1:{web.port}": f"web{i}" for i, web in enumerate(web_list)},
            "web_urls": [web.base_url for web in web_list],
            "pids": {
                "web": [web.process.pid for web in web_list if web.process],
                "workers": [worker.process.pid for worker in worker_list if worker.process],
                "nginx": [proxy.process.pid] if proxy.process else [],
            },
            "logs": logs,
        }
    finally:
        for process in reversed(started):
            process.stop()


def cpu_now(pids: dict[str, list[int]], services: dict[str, int | None]) -> dict[str, float]:
    """CPU seconds so far of each group of processes, this one and the machine."""
    own = os.times()
    groups = {name: sum(process_cpu(pid) for pid in members) for name, members in pids.items()}
    for name, pid in services.items():
        groups[name] = process_cpu(pid) if pid else 0.0
    return {**groups, "bench": own.user + own.system, "machine": machine_cpu()}


# --- users, conversations and the clients -------------------------------------------------


def users_create(prefix: str, count: int, conversations: int = 1) -> list[tuple[str, list[str]]]:
    """`count` users (no password), each with a token and conversations: (token, [ids])."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from chat.models import Conversation

    model = get_user_model()
    users = model.objects.bulk_create(
        [model(username=f"{prefix}-{index}", password="!") for index in range(count)]
    )
    tokens = Token.objects.bulk_create([Token(key=Token.generate_key(), user=u) for u in users])
    made = Conversation.objects.bulk_create(
        [Conversation(owner=user, title=prefix) for user in users for _ in range(conversations)]
    )
    ids = [str(conversation.pk) for conversation in made]
    return [
        (token.key, ids[index * conversations : (index + 1) * conversations])
        for index, token in enumerate(tokens)
    ]


async def turn(
    client: Any, ws: str, token: str, conversation: str, opened: list[str], go: asyncio.Event
) -> dict[str, Any]:
    """One client: its socket opened, then (at `go`) its POST; its events until the run's end."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    headers = {"Authorization": f"Token {token}"}
    url = f"{ws}/ws/conversations/{conversation}/?after=0"
    outcome: dict[str, Any] = {"conversation": conversation, "events": []}
    try:
        async with connect(url, additional_headers=headers, open_timeout=60) as socket:
            response = socket.response
            outcome["socket_web"] = response.headers.get("X-Upstream", "") if response else ""
            opened.append(conversation)

            async def read() -> None:
                while True:
                    try:
                        message = json.loads(await socket.recv())
                    except ConnectionClosed as closed:
                        outcome.setdefault("error", f"the socket closed: {closed}")
                        return
                    if "seq" not in message:
                        continue  # a ping or an ack: not run events
                    outcome["events"].append((message["seq"], message["type"]))
                    if message["type"] in {"run.completed", "run.failed", "run.cancelled"}:
                        outcome["ended"] = time.perf_counter()
                        return

            reading = asyncio.create_task(read())
            await go.wait()
            outcome["started"] = started = time.perf_counter()
            response = await client.post(
                f"/api/v1/conversations/{conversation}/messages/"
                f"?wait=true&timeout={TURN_TIMEOUT_S}",
                json={"content": "12*7?"},
                headers=headers,
            )
            outcome["latency"] = time.perf_counter() - started
            outcome["post_web"] = response.headers.get("X-Upstream", "")
            payload = response.json()
            run = payload.get("run") or {}
            outcome["run_id"] = run.get("id")
            if response.status_code != 200 or run.get("status") != "completed":
                outcome["error"] = f"HTTP {response.status_code}: {json.dumps(payload)[:300]}"
            try:
                await asyncio.wait_for(reading, TURN_TIMEOUT_S)
            except TimeoutError:
                outcome.setdefault("error", "the socket saw no end of the run")
    except Exception as exc:  # counted and shown as an error of this turn
        outcome.setdefault("error", f"{type(exc).__name__}: {exc}")
    return outcome


async def turns_run(
    config: dict[str, Any], clients: list[tuple[str, list[str]]], cpu: Any
) -> dict[str, Any]:
    """Open every client's socket, then post every turn at once: outcomes, wall, CPU used."""
    import httpx

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=len(clients))
    timeout = httpx.Timeout(TURN_TIMEOUT_S + 15, connect=30)
    async with httpx.AsyncClient(base_url=config["http"], limits=limits, timeout=timeout) as http:
        opened: list[str] = []
        go = asyncio.Event()
        tasks = [
            asyncio.create_task(turn(http, config["ws"], token, ids[0], opened, go))
            for token, ids in clients
        ]
        deadline = time.monotonic() + 60
        while len(opened) + sum(t.done() for t in tasks) < len(tasks):
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        before = cpu()
        go.set()
        started = time.perf_counter()
        outcomes = list(await asyncio.gather(*tasks))
        ends = [o["started"] + o["latency"] for o in outcomes if "latency" in o]
        wall = (max(ends) if ends else time.perf_counter()) - started
        after = cpu()
    used = {name: after[name] - before[name] for name in after}
    return {"outcomes": outcomes, "wall": wall, "cpu": used}


async def posts(web_urls: list[str], token: str, targets: list[str], *, together: bool) -> Counter:
    """POST a message to each conversation, the web processes in turn: the statuses counted."""
    import httpx

    headers = {"Authorization": f"Token {token}"}
    async with httpx.AsyncClient(timeout=60) as client:

        async def post(index: int, conversation: str) -> int:
            url = f"{web_urls[index % len(web_urls)]}/api/v1/conversations/{conversation}/messages/"
            response = await client.post(url, json={"content": "12*7?"}, headers=headers)
            return response.status_code

        if together:
            statuses = await asyncio.gather(*(post(i, c) for i, c in enumerate(targets)))
        else:
            statuses = [await post(i, c) for i, c in enumerate(targets)]
    return Counter(statuses)


async def sockets_open(web_urls: list[str], token: str, conversation: str, count: int) -> Counter:
    """Open `count` sockets at once, the web processes in turn: how many stay open, how many shut."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    headers = {"Authorization": f"Token {token}"}
    urls = [url.replace("http://", "ws://", 1) for url in web_urls]
    outcome: Counter[str] = Counter()
    async with contextlib.AsyncExitStack() as held:

        async def open_one(index: int) -> None:
            url = f"{urls[index % len(urls)]}/ws/conversations/{conversation}/"
            socket = await held.enter_async_context(connect(url, additional_headers=headers))
            try:
                await asyncio.wait_for(socket.recv(), 2.0)
                outcome["open"] += 1  # something arrived: it is open
            except TimeoutError:
                outcome["open"] += 1
            except ConnectionClosed as closed:
                outcome[f"closed {closed.rcvd.code if closed.rcvd else '?'}"] += 1

        await asyncio.gather(*(open_one(i) for i in range(count)))
    return outcome


def limits_check(config: dict[str, Any], label: str) -> dict[str, Any]:
    """One user's requests spread over the web processes: do its limits hold as with one?"""
    over = MESSAGE_RATE + 10
    (
        (seq_token, seq_ids),
        (burst_token, burst_ids),
        (run_token, run_ids),
        (socket_token, socket_ids),
    ) = [
        users_create(f"{label}-{kind}", 1, conversations=count)[0]
        for kind, count in (
            ("rate-seq", over),
            ("rate-burst", over),
            ("one-run", 1),
            ("sockets", 1),
        )
    ]
    webs = config["web_urls"]
    sequential = asyncio.run(posts(webs, seq_token, seq_ids, together=False))
    burst = asyncio.run(posts(webs, burst_token, burst_ids, together=True))
    one_run = asyncio.run(posts(webs, run_token, run_ids * 10, together=True))
    sockets = asyncio.run(sockets_open(webs, socket_token, socket_ids[0], SOCKETS_PER_USER + 4))
    return {
        f"message rate: {over} posts one by one, {MESSAGE_RATE} allowed": {
            "expected": {202: MESSAGE_RATE, 429: over - MESSAGE_RATE},
            "seen": dict(sequential),
        },
        f"message rate: {over} posts at once, {MESSAGE_RATE} allowed": {
            "expected": {202: MESSAGE_RATE, 429: over - MESSAGE_RATE},
            "seen": dict(burst),
        },
        "one active run: 10 posts at once to one conversation": {
            "expected": {202: 1, 409: 9},
            "seen": dict(one_run),
        },
        f"sockets: {SOCKETS_PER_USER + 4} opened at once, {SOCKETS_PER_USER} allowed": {
            "expected": {"open": SOCKETS_PER_USER, "closed 4429": 4},
            "seen": dict(sockets),
        },
    }


# --- what the database says -----------------------------------------------------------------


def events_check(outcomes: list[dict[str, Any]]) -> dict[str, int]:
    """Every stored event of each conversation received on its socket once, in order, no gap."""
    from chat.models import RunEvent

    stored: dict[str, list[int]] = {}
    conversations = [outcome["conversation"] for outcome in outcomes]
    rows = RunEvent.objects.filter(conversation_id__in=conversations).order_by("seq")
    for conversation, seq in rows.values_list("conversation_id", "seq"):
        stored.setdefault(str(conversation), []).append(seq)
    counts = Counter(
        {"stored": 0, "received": 0, "lost": 0, "duplicated": 0, "out of order": 0, "gaps": 0}
    )
    for outcome in outcomes:
        got = [seq for seq, _ in outcome["events"]]
        want = stored.get(outcome["conversation"], [])
        counts["stored"] += len(want)
        counts["received"] += len(got)
        counts["lost"] += len(set(want) - set(got))
        counts["unexpected"] += len(set(got) - set(want))
        counts["duplicated"] += len(got) - len(set(got))
        counts["out of order"] += sum(1 for a, b in pairwise(got) if b <= a)
        counts["gaps"] += sum(1 for a, b in pairwise(got) if b > a + 1)
        counts["stored with a gap"] += (
            want != list(range(want[0], want[0] + len(want))) if want else 0
        )
        ended = bool(outcome["events"]) and outcome["events"][-1][1] == "run.completed"
        counts["sockets that saw run.completed last"] += ended
    return dict(counts)


def workers_of(run_ids: list[str], worker_pids: list[int]) -> dict[str, int]:
    """How many of the runs each worker process ran (the audit row's host:pid of its tool call)."""
    from chat.models import ToolExecution

    names = {str(pid): f"worker{index}" for index, pid in enumerate(worker_pids)}
    seen: Counter[str] = Counter()
    for worker in ToolExecution.objects.filter(run_id__in=run_ids).values_list("worker", flat=True):
        seen[names.get(worker.rsplit(":", 1)[-1], worker)] += 1
    return dict(seen)


def settle(timeout: float = 120) -> None:
    """Wait until no run is queued or running (the checks' runs too), so the next starts clean."""
    from chat.models import Run, RunStatus

    deadline = time.monotonic() + timeout
    active = [RunStatus.QUEUED, RunStatus.RUNNING]
    while Run.objects.filter(status__in=active).exists():
        if time.monotonic() > deadline:
            raise RuntimeError("runs still active after the benchmark's wait")
        time.sleep(0.2)


# --- one configuration, measured ------------------------------------------------------------


def measure(
    config: dict[str, Any], services: dict[str, Any], *, label: str, turns: int, warmup: int
) -> dict[str, Any]:
    """Warm-up, one turn alone (3 times), `turns` at once with their events, the limits."""
    pids = config["pids"]

    def cpu() -> dict[str, float]:
        return cpu_now(pids, services["service_pids"])

    asyncio.run(turns_run(config, users_create(f"{label}-warm", warmup), cpu))
    alone = [
        asyncio.run(turns_run(config, users_create(f"{label}-alone{i}", 1), cpu))["wall"]
        for i in range(3)
    ]
    run = asyncio.run(turns_run(config, users_create(label, turns), cpu))
    outcomes = run["outcomes"]
    errors = [o["error"] for o in outcomes if "error" in o]
    latencies = [o["latency"] for o in outcomes if "latency" in o and "error" not in o]
    to_socket = [o["ended"] - o["started"] for o in outcomes if "ended" in o and "started" in o]
    webs = config["webs"]
    across = Counter(
        "socket and POST on different web processes"
        if o.get("socket_web") != o.get("post_web")
        else "socket and POST on the same web process"
        for o in outcomes
        if "post_web" in o
    )
    served = Counter(webs.get(o.get("post_web", ""), o.get("post_web", "?")) for o in outcomes)
    run_ids = [o["run_id"] for o in outcomes if o.get("run_id")]
    events = events_check(outcomes)
    ran_by = workers_of(run_ids, pids["workers"])
    limits = limits_check(config, label)
    settle()
    used = run["cpu"]
    stack_cpu = sum(used[name] for name in ("web", "workers", "postgres", "redis", "nginx"))
    wall = run["wall"]
    completed = len(latencies)
    return {
        "label": label,
        "webs": len(pids["web"]),
        "workers": len(pids["workers"]),
        "turns": turns,
        "completed": completed,
        "errors": len(errors),
        "error_messages": errors[:10],
        "wall_s": wall,
        "turns_per_s": completed / wall,
        "one_turn_alone_s": percentile(alone, 0.5),
        "latency_p50_s": percentile(latencies, 0.5),
        "latency_p95_s": percentile(latencies, 0.95),
        "latency_max_s": max(latencies) if latencies else float("nan"),
        "run_completed_on_socket_p50_s": percentile(to_socket, 0.5),
        "run_completed_on_socket_p95_s": percentile(to_socket, 0.95),
        "cpu_s": used,
        "stack_cpu_s": stack_cpu,
        "cores_used": stack_cpu / wall,
        "turns_per_cpu_s": completed / stack_cpu if stack_cpu else float("nan"),
        "cpu_ms_per_turn": {
            name: 1000 * used[name] / max(completed, 1)
            for name in ("web", "workers", "postgres", "redis", "nginx", "bench")
        },
        "stack_cpu_ms_per_turn": 1000 * stack_cpu / max(completed, 1),
        "events": events,
        "posts_by_web": dict(served),
        "sockets_and_posts": dict(across),
        "runs_by_worker": ran_by,
        "limits": limits,
    }


# --- the report ---------------------------------------------------------------------------


def table_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """One configuration's column of the table: (row name, value)."""
    used, per_turn, events = result["cpu_s"], result["cpu_ms_per_turn"], result["events"]
    pairs = result["webs"]
    rows = [
        ("web + worker processes", f"{result['webs']} + {result['workers']}"),
        ("turns completed / errors", f"{result['completed']} / {result['errors']}"),
        ("wall time, first POST to last 200 (s)", f"{result['wall_s']:.2f}"),
        ("turns/s", f"{result['turns_per_s']:.2f}"),
        ("turns/s per web + worker pair", f"{result['turns_per_s'] / pairs:.2f}"),
        ("turn latency p50 (s)", f"{result['latency_p50_s']:.2f}"),
        ("turn latency p95 (s)", f"{result['latency_p95_s']:.2f}"),
        ("one turn alone, p50 of 3 (s)", f"{result['one_turn_alone_s']:.2f}"),
        ("run.completed on the socket, p50 (s)", f"{result['run_completed_on_socket_p50_s']:.2f}"),
        ("CPU s: web", f"{used['web']:.1f}"),
        ("CPU s: workers", f"{used['workers']:.1f}"),
        ("CPU s: PostgreSQL", f"{used['postgres']:.1f}"),
        ("CPU s: Redis", f"{used['redis']:.1f}"),
        ("CPU s: nginx", f"{used['nginx']:.1f}"),
        ("CPU s: the stack (the five above)", f"{result['stack_cpu_s']:.1f}"),
        ("CPU s: this process (clients, model)", f"{used['bench']:.1f}"),
        ("CPU s: the machine, all cores", f"{used['machine']:.1f}"),
        ("cores used by the stack", f"{result['cores_used']:.2f}"),
        ("turns/s per core used", f"{result['turns_per_cpu_s']:.2f}"),
        ("CPU ms per turn, the stack", f"{result['stack_cpu_ms_per_turn']:.0f}"),
        ("CPU ms per turn, web / workers", f"{per_turn['web']:.0f} / {per_turn['workers']:.0f}"),
        ("events stored / received", f"{events['stored']} / {events['received']}"),
        ("events lost / duplicated", f"{events['lost']} / {events['duplicated']}"),
        ("events out of order / gaps", f"{events['out of order']} / {events['gaps']}"),
        (
            "sockets ending on run.completed",
            str(events["sockets that saw run.completed last"]),
        ),
        (
            "socket and POST on other web processes",
            str(result["sockets_and_posts"].get("socket and POST on different web processes", 0)),
        ),
        (
            "POSTs by web process",
            " ".join(f"{v}" for _, v in sorted(result["posts_by_web"].items())),
        ),
        ("runs by worker", " ".join(f"{v}" for _, v in sorted(result["runs_by_worker"].items()))),
    ]
    for name, check in result["limits"].items():
        seen = check["seen"]
        held = all(seen.get(key, 0) == value for key, value in check["expected"].items())
        shown = " ".join(f"{key}x{value}" for key, value in sorted(seen.items(), key=str))
        rows.append((name, f"{shown} {'ok' if held else 'NOT HELD'}"))
    return rows


def span(values: list[float], digits: int = 2) -> str:
    """A range of figures as 'low to high' (one figure alone as it is)."""
    low, high = min(values), max(values)
    return (
        f"{low:.{digits}f}"
        if round(low, digits) == round(high, digits)
        else (f"{low:.{digits}f} to {high:.{digits}f}")
    )


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """(b) against (a), round by round: throughput per process, CPU per turn, the checks."""
    one = [r for r in results if r["webs"] == 1]
    two = [r for r in results if r["webs"] == 2]
    per_process = [
        b["turns_per_s"] / 2 / a["turns_per_s"]
        for a, b in zip(one, two, strict=False)
        if a["turns_per_s"]
    ]
    cpu_ratio = [
        b["stack_cpu_ms_per_turn"] / a["stack_cpu_ms_per_turn"]
        for a, b in zip(one, two, strict=False)
        if a["completed"] and b["completed"]
    ]
    limits_held = all(
        all(check["seen"].get(k, 0) == v for k, v in check["expected"].items())
        for result in results
        for check in result["limits"].values()
    )
    return {
        "turns_per_s_1": [r["turns_per_s"] for r in one],
        "turns_per_s_2": [r["turns_per_s"] for r in two],
        "turns_per_s_per_core_used_1": [r["turns_per_cpu_s"] for r in one],
        "turns_per_s_per_core_used_2": [r["turns_per_cpu_s"] for r in two],
        "per_process_ratio": per_process,
        "per_process_within_20pct": bool(per_process)
        and min(per_process) >= 1 - PER_PROCESS_WITHIN,
        "cpu_per_turn_ratio": cpu_ratio,
        "cpu_per_turn_within_20pct": bool(cpu_ratio) and max(cpu_ratio) <= 1 + PER_PROCESS_WITHIN,
        "events_lost": sum(r["events"]["lost"] for r in results),
        "events_duplicated": sum(r["events"]["duplicated"] for r in results),
        "events_out_of_order_or_gaps": sum(
            r["events"]["out of order"] + r["events"]["gaps"] for r in results
        ),
        "errors": sum(r["errors"] for r in results),
        "limits_held": limits_held,
    }


def report(results: list[dict[str, Any]], totals: dict[str, Any], cores: int) -> None:
    columns = [table_rows(result) for result in results]
    width = max(len(name) for name, _ in columns[0]) + 2
    print()
    print(f"{'':<{width}}" + "".join(f"{result['label']:>14}" for result in results))
    for index, (name, _) in enumerate(columns[0]):
        values = [column[index][1] for column in columns]
        if any(len(value) > 13 for value in values):  # the limit checks: one line each
            print(f"{name}")
            for result, value in zip(results, values, strict=True):
                print(f"    {result['label']}: {value}")
        else:
            print(f"{name:<{width}}" + "".join(f"{value:>14}" for value in values))
    print()
    ratio, cpu_ratio = totals["per_process_ratio"], totals["cpu_per_turn_ratio"]
    print(
        f"turns/s, 1 + 1: {span(totals['turns_per_s_1'])}; 2 + 2: {span(totals['turns_per_s_2'])}"
    )
    print(
        f"turns/s per core used, 1 + 1: {span(totals['turns_per_s_per_core_used_1'])}; "
        f"2 + 2: {span(totals['turns_per_s_per_core_used_2'])} ({cores} cores on the machine)"
    )
    if ratio:
        print(
            f"throughput per process, 2 + 2 / 1 + 1: {span(ratio)} "
            f"({'within' if totals['per_process_within_20pct'] else 'NOT within'} 20%)"
        )
        print(
            f"CPU per turn, 2 + 2 / 1 + 1: {span(cpu_ratio)} "
            f"({'within' if totals['cpu_per_turn_within_20pct'] else 'NOT within'} 20%)"
        )
    print(
        f"events lost {totals['events_lost']}, duplicated {totals['events_duplicated']}, "
        f"out of order or with a gap {totals['events_out_of_order_or_gaps']}; "
        f"turn errors {totals['errors']}; limits held: {'yes' if totals['limits_held'] else 'NO'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=200, help="turns posted at once")
    parser.add_argument("--delay", type=float, default=0.5, help="model seconds per answer")
    parser.add_argument("--rounds", type=int, default=2, help="(a) then (b), this many times")
    parser.add_argument("--warmup", type=int, default=10, help="untimed turns at once first")
    parser.add_argument(
        "--concurrency", type=int, default=50, help="threads per worker (docker-compose's)"
    )
    args = parser.parse_args()
    nginx = find_nginx()
    machine = machine_info()

    def responder(body: dict[str, Any]) -> Any:
        last = body["messages"][-1]
        if last["role"] == "user" and body.get("tools"):
            call = [("calculator", json.dumps({"expression": "12*7"}))]
            return tool_calls_reply(call, delay_s=args.delay)
        return text_reply("12 times 7 is 84.", delay_s=args.delay)

    results: list[dict[str, Any]] = []
    # The production settings and their default limits (no BENCH_ENV): each user
    # posts one turn, and the limit checks count on the defaults.
    with running_services(responder=responder, extra_env=dict(PRODUCTION_ENV)) as services:
        logging.disable(logging.INFO)
        for number in range(1, args.rounds + 1):
            for name, count in (("a", 1), ("b", 2)):
                label = f"{name}{number}"
                print(
                    f"round {number}, ({name}): {count} web + {count} worker, "
                    f"{args.turns} turns at once ...",
                    flush=True,
                )
                with running_configuration(
                    services,
                    nginx,
                    webs=count,
                    workers=count,
                    concurrency=args.concurrency,
                    name=label,
                ) as config:
                    results.append(
                        measure(config, services, label=label, turns=args.turns, warmup=args.warmup)
                    )
    totals = summary(results)
    cores = os.cpu_count() or 1
    report(results, totals, cores)
    machine["load_average_end"] = os.getloadavg()
    path = write_results(
        "scale_out",
        {
            "turns": args.turns,
            "delay_s": args.delay,
            "rounds": args.rounds,
            "concurrency": args.concurrency,
            "machine": machine,
            "settings": PRODUCTION_ENV,
            "summary": totals,
            "runs": results,
        },
    )
    print(f"written to {path}")


if __name__ == "__main__":
    sys.exit(main())
