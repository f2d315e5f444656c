"""Fixtures for the turn engine: a scripted OpenAI-compatible server and a waiting helper."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chat.models import Run, RunStatus
from tests.llm_server import ScriptedLLMServer

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def llm_server(settings):
    """A scripted OpenAI-compatible server, with the openai provider pointed at it."""
    server = ScriptedLLMServer().start()
    settings.LLM_PROVIDER = "openai"
    settings.OPENAI_API_KEY = "sk-test"
    settings.OPENAI_BASE_URL = server.base_url
    settings.LLM_MODEL = "test-model"
    settings.LLM_COMPOSE_MODEL = ""
    settings.LLM_MAX_RETRIES = 2
    settings.LLM_TIMEOUT_S = 5
    yield server
    server.stop()


def wait_for_run(run: Run, timeout: float = 15.0) -> Run:
    """Poll until the run has ended; return it fresh from the database."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED):
            return run
        time.sleep(0.02)
    raise AssertionError(f"run {run.pk} still {run.status} after {timeout}s")


class CeleryWorker:
    """A real `celery worker` process (threads pool) against the test database and Redis."""

    def __init__(self, *, env: dict[str, str], log_path, name: str) -> None:
        self.env = env
        self.log_path = log_path
        self.name = name
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> CeleryWorker:
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "project",
            "worker",
            "-P",
            "threads",
            "-c",
            "6",
            "-n",
            f"{self.name}@%h",
            "-l",
            "info",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=self.env, stdout=self._log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while "ready." not in self.log():
            if self.process.poll() is not None:
                raise RuntimeError(f"celery worker exited:\n{self.log()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"celery worker not ready after {timeout}s:\n{self.log()}")
            time.sleep(0.1)
        return self

    def kill(self) -> None:
        """SIGKILL: no warm shutdown, no acknowledgements, like a machine that died."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def celery_env(llm_server, redis_url, settings, transactional_db, tmp_path):
    """Point this process at Redis (tasks go to Celery) and describe the workers' environment."""
    from django.db import connection

    from project.celery import app
    from tests.plugins.servers import database_url, server_environment

    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    settings.TOOLCHAT_TASKS_IN_PROCESS = False
    old_broker = app.conf.broker_url
    app.conf.broker_url = redis_url
    _reset_producer_pool(app)
    env = server_environment(
        DATABASE_URL=database_url(connection.settings_dict),
        DATABASE_POOL="0",
        REDIS_URL=redis_url,
        LLM_PROVIDER="openai",
        OPENAI_API_KEY="sk-test",
        OPENAI_BASE_URL=llm_server.base_url,
        LLM_MODEL="test-model",
        LLM_MAX_RETRIES="2",
        TOOLCHAT_TOOL_MODULES=",".join(
            [*settings.TOOLCHAT_TOOL_MODULES, "tests.chat.services.slow_tools"]
        ),
        TOOLCHAT_TEST_LEDGER=str(ledger),
        # Crash recovery on a test's time scale: redelivery after 3 s, a silent
        # lease is stale after 2 s, a silent tool call is dead 1 s past its timeout.
        CELERY_VISIBILITY_TIMEOUT="3",
        CELERY_RESTORE_INTERVAL="1",
        TOOLCHAT_RUN_STALE_S="2",
        TOOLCHAT_HEARTBEAT_S="0.3",
        TOOLCHAT_TOOL_GRACE_S="1",
    )
    # Tasks queued by a previous test must not leak into this one.
    import redis

    redis.Redis.from_url(redis_url).flushall()
    yield {"env": env, "ledger": ledger, "logs": tmp_path}
    app.conf.broker_url = old_broker
    _reset_producer_pool(app)


def _reset_producer_pool(app):
    """Forget the app's producer pool so the next send uses the current broker URL.

    kombu keeps one pool per broker URL process-wide, so the pools are only
    forgotten here, never closed (a closed one would be handed back later).
    """
    app._after_fork()


@pytest.fixture
def start_worker(celery_env):
    """Start real Celery workers; all are stopped at the end of the test."""
    workers: list[CeleryWorker] = []

    def start(name: str = "w1") -> CeleryWorker:
        worker = CeleryWorker(
            env=celery_env["env"], log_path=celery_env["logs"] / f"{name}.log", name=name
        )
        workers.append(worker)
        return worker.start()

    yield start
    for worker in workers:
        worker.stop()
