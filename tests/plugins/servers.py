"""A real ASGI server for end-to-end tests: uvicorn serving project.asgi.

`asgi_server` starts `uvicorn project.asgi:application` in a subprocess, once
per test session, against the test database that pytest-django created, and
gives each test its base URL (``http://127.0.0.1:PORT``). It runs with the
test settings, DEBUG off, and static files collected into a temporary folder
and served by ServeStatic, as in production.

The server is another process, so it sees only committed rows: the fixture
pulls in `transactional_db`, so that what a test creates is committed (and
flushed afterwards). The SQLite test database lives in memory, so only the
PostgreSQL pass can share it: mark such tests ``@pytest.mark.postgres``.

    @pytest.mark.postgres
    def test_healthz(asgi_server):
        assert urllib.request.urlopen(f"{asgi_server}/healthz/").status == 200
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.plugins.services import free_port

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0
# How long uvicorn keeps an idle connection open: as the Dockerfile and docker-compose.yml
# start it, longer than the clients' own keep-alive (docs/deploy.md).
KEEP_ALIVE_S = 65

# Variables of the test process that must not reach the server: the async
# escape hatch the browser plugin sets, and a Redis the server was not given.
NOT_INHERITED = {"DJANGO_ALLOW_ASYNC_UNSAFE", "REDIS_URL", "PYTEST_CURRENT_TEST"}


def server_environment(**overrides: str) -> dict[str, str]:
    """This process's environment for a server subprocess, with the test settings."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env["DJANGO_SETTINGS_MODULE"] = "project.settings.test"
    env.update(overrides)
    return env


def database_url(settings_dict: dict[str, Any]) -> str:
    """Turn a Django PostgreSQL connection's settings into a DATABASE_URL."""
    user = quote(settings_dict.get("USER") or "", safe="")
    password = quote(settings_dict.get("PASSWORD") or "", safe="")
    credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or 5432
    return f"postgres://{credentials}{host}:{port}/{quote(settings_dict['NAME'], safe='')}"


class AsgiServer:
    """One uvicorn (or daphne) subprocess serving project.asgi:application on loopback."""

    def __init__(
        self,
        *,
        env: dict[str, str],
        log_path: Path,
        server: str = "uvicorn",
        args: tuple[str, ...] = (),
    ) -> None:
        self.server = server
        self.args = args  # the server's own options, beside host and port
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = server_environment(**env)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the server and wait until /healthz/ answers 200."""
        command = [sys.executable, "-m", "uvicorn", "project.asgi:application"]
        command += ["--host", "127.0.0.1", "--port", str(self.port), "--lifespan", "off"]
        command += ["--timeout-keep-alive", str(KEEP_ALIVE_S)]  # as deployed (Dockerfile)
        if self.server == "daphne":
            command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port)]
            command.append("project.asgi:application")
        command[-1:-1] = self.args
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.server} exited with {self.process.returncode}:\n{self.log()}"
                )
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(f"{self.base_url}/healthz/", timeout=2) as response,
            ):
                if response.status == 200:
                    return
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(
                    f"{self.server} did not answer /healthz/ within {START_TIMEOUT_S}s:\n{self.log()}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop the server: SIGTERM, then SIGKILL if it does not exit."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def log(self) -> str:
        """The server's output so far (for failure messages)."""
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return "(no log)"


@pytest.fixture(scope="session")
def asgi_server_session(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AsgiServer]:
    """The session's uvicorn server (prefer `asgi_server`, which also commits test data)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.fail(
            "asgi_server needs the PostgreSQL pass (the SQLite test database is in memory, "
            "so another process cannot see it): mark the test @pytest.mark.postgres",
            pytrace=False,
        )
    folder = tmp_path_factory.mktemp("asgi-server")
    env = {
        "DATABASE_URL": database_url(connection.settings_dict),
        "DJANGO_STATIC_ROOT": str(folder / "static"),
    }
    collect = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput"],
        cwd=ROOT,
        env=server_environment(**env),
        capture_output=True,
        text=True,
        check=False,
    )
    if collect.returncode != 0:
        pytest.fail(f"collectstatic failed:\n{collect.stderr}", pytrace=False)
    server = AsgiServer(env=env, log_path=folder / "uvicorn.log")
    server.start()
    try:
        yield server
    finally:
        # Before pytest-django drops the test database, which it cannot do
        # while the server's pool holds connections to it.
        server.stop()


@pytest.fixture
def asgi_server(asgi_server_session: AsgiServer, transactional_db: None) -> Iterator[str]:
    """Base URL of a real uvicorn serving the app; the test's rows are committed."""
    yield asgi_server_session.base_url
    server_settle()


def server_settle(timeout: float = 10.0) -> None:
    """Wait until the server's background work of this test has stopped writing.

    A test may end as soon as it sees what it checks, while the server still
    works in its background threads (the rest of a run, its follow-up
    suggestions). Flushing the test database under those writes deadlocks:
    wait until no run is active and nothing new was recorded for a moment.
    """
    from chat.models import ModelCall, Run, RunEvent, RunStatus, ToolExecution

    # A run awaiting approval does nothing until someone decides: it counts as settled.
    working = [RunStatus.QUEUED, RunStatus.RUNNING]

    def footprint() -> tuple[int, ...]:
        return (
            Run.objects.filter(status__in=working).count(),
            RunEvent.objects.count(),
            ModelCall.objects.count(),
            ToolExecution.objects.exclude(finished_at=None).count(),
        )

    deadline = time.monotonic() + timeout
    last = footprint()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = footprint()
        if now == last and now[0] == 0:
            return
        last = now


@pytest.fixture
def scripted_server(llm_server, asgi_server_session, transactional_db):
    """A second uvicorn like the session's, whose model is the scripted server."""
    folder = asgi_server_session.log_path.parent
    env = {
        **asgi_server_session.env,
        "LLM_PROVIDER": "openai",
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_BASE_URL": llm_server.base_url,
        "LLM_MODEL": "test-model",
    }
    server = AsgiServer(env=env, log_path=folder / "uvicorn-scripted.log")
    server.start()
    try:
        yield server.base_url
        server_settle()
    finally:
        server.stop()
