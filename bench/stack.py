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


def default_responder(answer_words: int = 20) -> Callable[[dict[str, Any]], Reply]:
    """A model that calls the calculator on a user message and answers after tool results."""
    answer = " ".join(f"word{i}" for i in range(answer_words))

    def respond(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "user" and body.get("tools"):
            return tool_calls_reply([("calculator", json.dumps({"expression": "12*7"}))])
        return text_reply(answer)

    return respond


@contextlib.contextmanager
def running_stack(
    *, responder: Callable[[dict[str, Any]], Reply] | None = None, workers: int = 1
) -> Iterator[dict[str, Any]]:
    """Start everything; yield URLs, the Django-ready environment and the model server."""
    postgres, redis = PostgresServer(), RedisServer()
    postgres.start()
    redis.start()
    llm = ScriptedLLMServer(responder=responder or default_responder()).start()
    logs = Path(tempfile.mkdtemp(prefix="toolchat-bench-"))
    processes: list[Any] = []
    try:
        import psycopg

        with psycopg.connect(postgres.url("postgres"), autocommit=True) as connection:
            connection.execute("CREATE DATABASE toolchat")
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "project.settings.test",
            "DATABASE_URL": postgres.url("toolchat"),
            "REDIS_URL": redis.url,
            "LLM_PROVIDER": "openai",
            "OPENAI_API_KEY": "sk-bench",
            "OPENAI_BASE_URL": llm.base_url,
            "LLM_MODEL": "bench-model",
            "DJANGO_STATIC_ROOT": str(logs / "static"),
        }
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
        os.environ.update(
            {k: env[k] for k in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL")}
        )
        import django

        django.setup()
        for index in range(workers):
            worker = CeleryWorker(
                env=env, log_path=logs / f"worker{index}.log", name=f"bench{index}"
            )
            processes.append(worker.start())
        from tests.plugins.servers import AsgiServer

        server = AsgiServer(env=env, log_path=logs / "uvicorn.log")
        server.start()
        processes.append(server)
        yield {
            "http": server.base_url,
            "ws": server.base_url.replace("http", "ws", 1),
            "llm": llm,
            "logs": logs,
            "env": env,
        }
    finally:
        for process in reversed(processes):
            process.stop()
        llm.stop()
        redis.stop()
        postgres.stop()


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
