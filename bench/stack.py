"""The real stack for benchmarks: PostgreSQL, Redis, uvicorn, Celery, a scripted model.

Everything runs on loopback from the binaries on this machine (as the tests
do): a private PostgreSQL and Redis, `manage.py migrate`, a Celery worker and
a uvicorn server as subprocesses, and the scripted OpenAI-compatible server
in this process with zero model latency, so what is measured is toolchat.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.llm_server import Reply, ScriptedLLMServer, text_reply, tool_calls_reply  # noqa: E402
from tests.plugins.services import PostgresServer, RedisServer  # noqa: E402
from tests.stack import CeleryWorker  # noqa: E402

# So that benchmarks can post as fast as they like (the default is 30/min a user).
BENCH_ENV = {"TOOLCHAT_MESSAGE_RATE": "1000000/min"}


def default_responder(answer_words: int = 20) -> Callable[[dict[str, Any]], Reply]:
    """A model that calls the calculator on a user message and answers after tool results."""
    answer = " ".join(f"word{i}" for i in range(answer_words))

    def respond(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "user" and body.get("tools"):
            return tool_calls_reply([("calculator", json.dumps({"expression": "12*7"}))])
        return text_reply(answer)

    return respond


STEPS_MARK = "steps="  # "steps=2 ..." in a user message: call the calculator twice


def stepping_responder(answer_words: int = 20) -> Callable[[dict[str, Any]], Reply]:
    """A model that calls the calculator N times while tools are offered, then answers.

    N is 1, or what a `steps=N` at the start of the turn's user message says. The
    tool messages after the last user message tell it how many calls it has made,
    so the same model serves a two-pass turn (one call, then an answer without
    tools) and a loop turn (N calls, then an answer with the tools still offered).
    """
    answer = " ".join(f"word{i}" for i in range(answer_words))

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        last_user = max(i for i, message in enumerate(messages) if message["role"] == "user")
        content = messages[last_user]["content"]
        wanted = 1
        if isinstance(content, str) and content.startswith(STEPS_MARK):
            wanted = int(content[len(STEPS_MARK) :].split(None, 1)[0])
        made = sum(1 for message in messages[last_user:] if message["role"] == "tool")
        if body.get("tools") and made < wanted:
            expression = f"12*{7 + made}"
            return tool_calls_reply([("calculator", json.dumps({"expression": expression}))])
        return text_reply(answer)

    return respond


def _create_database(postgres: PostgresServer) -> None:
    import psycopg

    with psycopg.connect(postgres.url("postgres"), autocommit=True) as connection:
        connection.execute("CREATE DATABASE toolchat")


def _migrate(env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )


def _model_env(llm: ScriptedLLMServer) -> dict[str, str]:
    return {
        "DJANGO_SETTINGS_MODULE": "project.settings.test",
        "LLM_PROVIDER": "openai",
        "OPENAI_API_KEY": "sk-bench",
        "OPENAI_BASE_URL": llm.base_url,
        "LLM_MODEL": "bench-model",
    }


@contextlib.contextmanager
def running_services(
    *,
    responder: Callable[[dict[str, Any]], Reply] | None = None,
    extra_env: dict[str, str] | None = None,
) -> Iterator[dict[str, Any]]:
    """A private PostgreSQL (migrated) and Redis and the scripted model; Django set up here.

    Yields the environment for app processes (`env`), a folder for their logs,
    the model server, and the services' pids (for reading their CPU):
    PostgreSQL's postmaster (its backends are its children) and Redis.
    `extra_env` is added to the environment of every process, this one included.
    """
    postgres, redis = PostgresServer(), RedisServer()
    llm = ScriptedLLMServer(responder=responder or default_responder())
    try:
        postgres.start()
        redis.start()
        llm.start()
        _create_database(postgres)
        logs = Path(tempfile.mkdtemp(prefix="toolchat-bench-"))
        env = {
            **os.environ,
            **_model_env(llm),
            "DATABASE_URL": postgres.url("toolchat"),
            "REDIS_URL": redis.url,
            "DJANGO_STATIC_ROOT": str(logs / "static"),
            **(extra_env or {}),
        }
        _migrate(env)
        os.environ.update(
            {k: env[k] for k in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL")}
        )
        os.environ.update(extra_env or {})
        import django

        django.setup()
        yield {
            "service_pids": {
                "postgres": _postmaster_pid(postgres),
                "redis": redis.process.pid if redis.process else None,
            },
            "llm": llm,
            "logs": logs,
            "env": env,
        }
    finally:
        llm.stop()
        redis.stop()
        postgres.stop()


@contextlib.contextmanager
def running_stack(
    *,
    responder: Callable[[dict[str, Any]], Reply] | None = None,
    workers: int = 1,
    concurrency: int | None = None,
    extra_env: dict[str, str] | None = None,
) -> Iterator[dict[str, Any]]:
    """Start everything; yield URLs, the Django-ready environment and the model server.

    `concurrency` is the number of threads of each Celery worker (6 if None);
    `extra_env` is added to the environment of every process, this one included.
    """
    with running_services(responder=responder, extra_env=extra_env) as services:
        env, logs = services["env"], services["logs"]
        processes: list[Any] = []
        try:
            for index in range(workers):
                worker = CeleryWorker(
                    env=env,
                    log_path=logs / f"worker{index}.log",
                    name=f"bench{index}",
                    concurrency=concurrency or 6,
                )
                processes.append(worker.start())
            from tests.plugins.servers import AsgiServer

            server = AsgiServer(env=env, log_path=logs / "uvicorn.log")
            server.start()
            processes.append(server)
            yield {
                **services,
                # For reading their memory and CPU: the web server's and each worker's pid.
                "pids": {
                    "web": server.process.pid if server.process else None,
                    **{
                        f"worker{index}": worker.process.pid if worker.process else None
                        for index, worker in enumerate(processes[:-1])
                    },
                },
                "http": server.base_url,
                "ws": server.base_url.replace("http", "ws", 1),
            }
        finally:
            for process in reversed(processes):
                process.stop()


def _postmaster_pid(postgres: PostgresServer) -> int | None:
    """The running PostgreSQL's postmaster, from its data directory's postmaster.pid."""
    try:
        return int((postgres.data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def running_database(
    *,
    responder: Callable[[dict[str, Any]], Reply] | None = None,
    backend: str = "postgres",
    extra_env: dict[str, str] | None = None,
) -> Iterator[dict[str, Any]]:
    """A migrated database (private PostgreSQL, or a temporary SQLite file) and the model.

    No Redis, no workers, no web server: Django is set up in this process with
    tasks in-process (set `TOOLCHAT_TASKS_EAGER` to run a turn inline) and the
    openai provider pointed at the scripted model.
    """
    postgres = PostgresServer() if backend == "postgres" else None
    folder = Path(tempfile.mkdtemp(prefix="toolchat-bench-"))
    llm = ScriptedLLMServer(responder=responder or default_responder()).start()
    try:
        if postgres is not None:
            postgres.start()
            _create_database(postgres)
            url = postgres.url("toolchat")
        elif backend == "sqlite":
            url = f"sqlite:///{folder / 'bench.sqlite3'}"
        else:
            raise ValueError(f"backend {backend!r}: use 'postgres' or 'sqlite'")
        os.environ.pop("REDIS_URL", None)
        env = {**_model_env(llm), "DATABASE_URL": url, **(extra_env or {})}
        os.environ.update(env)
        _migrate(dict(os.environ))
        import django

        django.setup()
        yield {"llm": llm, "env": env, "backend": backend, "folder": folder}
    finally:
        llm.stop()
        if postgres is not None:
            postgres.stop()


def process_tree(pid: int) -> list[int]:
    """A process and all its descendants (a prefork worker's children), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(parents.get(current, []))
    return tree


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a process and its children so far (ended ones too)."""
    total = 0.0
    for member in process_tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
        if member == pid:  # the children it has reaped (PostgreSQL's ended backends)
            total += int(fields[13]) + int(fields[14])
    return total / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> float:
    """CPU seconds the whole machine has spent so far, all cores (/proc/stat, idle left out)."""
    values = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, _steal = (int(v) for v in values[:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], fraction: float) -> float:
    """The value below which `fraction` of the sorted values fall (nearest rank)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def write_results(name: str, payload: dict[str, Any]) -> Path:
    """Write a benchmark's results as JSON under bench/results/."""
    folder = ROOT / "bench" / "results"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path
