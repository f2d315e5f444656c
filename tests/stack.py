"""The real stack for end-to-end tests: a scripted model, Celery workers, waiting helpers.

Fixtures built on these live in tests/conftest.py: `llm_server` (a scripted
OpenAI-compatible server with the openai provider pointed at it),
`celery_env` (this process sends tasks to Redis; the environment for worker
and server subprocesses) and `start_worker` (real Celery workers).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def wait_for_run(run: Any, timeout: float = 15.0) -> Any:
    """Poll until the run has ended; return it fresh from the database."""
    from chat.models import RunStatus

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED):
            return run
        time.sleep(0.02)
    raise AssertionError(f"run {run.pk} still {run.status} after {timeout}s")


class CeleryWorker:
    """A real `celery worker` process against the test database and Redis.

    `pool` is "threads" (what the benchmarks and most tests use), "prefork"
    (forked child processes), or None: no -P and no -c, only `options` (the
    ones docker-compose passes, say).
    """

    def __init__(
        self,
        *,
        env: dict[str, str],
        log_path,
        name: str,
        concurrency: int = 6,
        pool: str | None = "threads",
        options: tuple[str, ...] = (),
    ) -> None:
        self.env = env
        self.log_path = log_path
        self.name = name
        self.concurrency = concurrency
        self.pool = pool
        self.options = options
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> CeleryWorker:
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "project",
            "worker",
            *(["-P", self.pool, "-c", str(self.concurrency)] if self.pool else []),
            *self.options,
            "-n",
            f"{self.name}@%h",
            "-l",
            "info",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        self._log = self.log_path.open("ab")
        # Its own process group, so that a kill takes a prefork pool's children too.
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
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
        """SIGKILL to the whole group: no warm shutdown, no acknowledgements, like a machine that died."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
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


def reset_producer_pool(app):
    """Forget the app's producer pool so the next send uses the current broker URL.

    kombu keeps one pool per broker URL process-wide, so the pools are only
    forgotten here, never closed (a closed one would be handed back later).
    """
    app._after_fork()
