"""Throwaway PostgreSQL and Redis servers for the test run.

The suite runs in two passes (see the Makefile): `TOOLCHAT_TEST_DB=sqlite`
and `TOOLCHAT_TEST_DB=postgres`. In the PostgreSQL pass this plugin starts a
private server from the binaries it finds (PATH, then Debian's
/usr/lib/postgresql/*/bin) before Django reads its settings, and points
DATABASE_URL at it. Redis is started on demand by the `redis_url` fixture.

Where a binary is missing the tests that need it are skipped with the reason;
with REQUIRE_SERVICES=1 (as in .ci/run) a missing binary fails the run, and so
does any skipped test at all.

We start the servers ourselves rather than through pytest-postgresql because
the tests also run as root (CI, containers) and PostgreSQL refuses to run as
root: the server has to be started as the `postgres` user.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REQUIRE_SERVICES = os.environ.get("REQUIRE_SERVICES", "").strip().lower() in {"1", "true", "yes"}
TEST_DB = os.environ.get("TOOLCHAT_TEST_DB", "sqlite").strip().lower()


def service_unavailable(reason: str) -> None:
    """Skip the current test for a missing service, or fail it when services are required."""
    if REQUIRE_SERVICES:
        pytest.fail(f"REQUIRE_SERVICES=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    """Return a TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def find_binary(name: str) -> str | None:
    """Find a server binary on PATH, or in Debian's versioned PostgreSQL folders."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return candidates[0] if candidates else None


def wait_for_port(port: int, timeout: float) -> None:
    """Block until something accepts connections on the port."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing listened on port {port} within {timeout}s")
        time.sleep(0.05)


@dataclass
class PostgresServer:
    """A private PostgreSQL cluster in a temporary folder, trust auth on loopback."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="toolchat-pg-")))
    port: int = field(default_factory=free_port)
    user_prefix: list[str] = field(default_factory=list)
    # Commits reach the WAL before they are acknowledged, so that a crash
    # (`halt`) loses none; off, the last fraction of a second's may be lost.
    crash_safe: bool = False

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def url(self, dbname: str = "toolchat") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> None:
        initdb, pg_ctl = find_binary("initdb"), find_binary("pg_ctl")
        assert initdb
        assert pg_ctl
        if os.geteuid() == 0:
            # PostgreSQL will not run as root; hand the folder to its own user.
            uid = pwd.getpwnam("postgres").pw_uid
            os.chown(self.root, uid, -1)
            self.user_prefix = ["runuser", "-u", "postgres", "--"]
        self._run(
            initdb,
            "-D",
            str(self.data_dir),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-instructions",
        )
        self.resume()

    def resume(self) -> None:
        """Start the server on its data and port (after `start`, or again after `halt`)."""
        pg_ctl = find_binary("pg_ctl")
        assert pg_ctl
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            f"-c synchronous_commit={'on' if self.crash_safe else 'off'} "
            "-c full_page_writes=off -c max_connections=300"
        )
        self._run(
            pg_ctl,
            "-D",
            str(self.data_dir),
            "-o",
            options,
            "-l",
            str(self.root / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        )
        wait_for_port(self.port, 30)

    def halt(self) -> None:
        """Stop the server as a crash would (`-m immediate`), keeping its data for `resume`."""
        pg_ctl = find_binary("pg_ctl")
        assert pg_ctl
        self._run(pg_ctl, "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")

    def stop(self) -> None:
        pg_ctl = find_binary("pg_ctl")
        if pg_ctl and self.data_dir.exists():
            with contextlib.suppress(subprocess.CalledProcessError):
                self._run(pg_ctl, "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, *args: str) -> None:
        subprocess.run([*self.user_prefix, *args], check=True, capture_output=True, cwd=self.root)


@dataclass
class RedisServer:
    """A private redis-server on loopback with persistence off."""

    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port, 15)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


_postgres: PostgresServer | None = None
_postgres_missing: str | None = None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> Iterator[None]:
    """Start PostgreSQL before pytest-django loads the settings that read DATABASE_URL."""
    global _postgres, _postgres_missing
    if TEST_DB == "postgres":
        missing = [name for name in ("initdb", "pg_ctl", "postgres") if not find_binary(name)]
        if missing:
            _postgres_missing = (
                f"PostgreSQL binaries not found ({', '.join(missing)}); "
                "install the postgresql package to run the PostgreSQL pass"
            )
        else:
            _postgres = PostgresServer()
            _postgres.start()
            atexit.register(_postgres.stop)
            os.environ["DATABASE_URL"] = _postgres.url()
    elif TEST_DB != "sqlite":
        raise pytest.UsageError(f"TOOLCHAT_TEST_DB={TEST_DB!r}: use 'sqlite' or 'postgres'.")
    else:
        os.environ.pop("DATABASE_URL", None)
    return (yield)


def pytest_report_header() -> str:
    where = (
        "SQLite"
        if TEST_DB == "sqlite"
        else (f"PostgreSQL on port {_postgres.port}" if _postgres else "PostgreSQL (missing)")
    )
    return f"toolchat: database pass = {where}; REQUIRE_SERVICES={int(REQUIRE_SERVICES)}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Route tests to their pass: PostgreSQL-only tests leave the SQLite pass."""
    if _postgres_missing:
        if REQUIRE_SERVICES:
            raise pytest.UsageError(f"REQUIRE_SERVICES=1 but {_postgres_missing}")
        for item in items:
            item.add_marker(pytest.mark.skip(reason=_postgres_missing))
        return
    if TEST_DB == "sqlite":
        keep = [item for item in items if item.get_closest_marker("postgres") is None]
        deselected = [item for item in items if item.get_closest_marker("postgres") is not None]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = keep


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under REQUIRE_SERVICES=1 a skipped test is a failure: CI must run everything."""
    if not REQUIRE_SERVICES:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if reporter:
            reporter.write_line(
                f"REQUIRE_SERVICES=1: {len(skipped)} test(s) were skipped; CI treats a skip "
                "as a failure (see the skip reasons above).",
                red=True,
            )


@pytest.fixture(scope="session")
def postgres_server() -> PostgresServer:
    """The PostgreSQL server of this pass (only in the PostgreSQL pass)."""
    if _postgres is None:
        service_unavailable("this test needs the PostgreSQL pass (TOOLCHAT_TEST_DB=postgres)")
    assert _postgres is not None
    return _postgres


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The URL of a private Redis server started for this test session."""
    if not shutil.which("redis-server"):
        service_unavailable("redis-server not found on PATH; install the redis-server package")
    server = RedisServer()
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
