"""Open WebUI, started offline in front of toolchat's /v1, for the tests marked `openwebui`.

Open WebUI runs from its own virtualenv (its package is a few GB): the variable
TOOLCHAT_OPENWEBUI_PYTHON names that interpreter; `.ci/openwebui.sh` installs
it and prints the variable. The `openwebui` fixture starts it on a free
loopback port with a fresh data folder, offline (`OFFLINE_MODE`,
`HF_HUB_OFFLINE`: its embedding model is not loaded, which chats do not need),
with every update check and telemetry off, and with one OpenAI connection: the
base URL and key given. A missing interpreter is a skip with the reason; with
REQUIRE_SERVICES=1 a failure. A run where the variable is not set leaves these
tests out (deselected, and said in the report's header); .ci/run sets it. They
need toolchat on a real server, so they run in the PostgreSQL pass.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.plugins.services import TEST_DB, free_port, service_unavailable, wait_for_port

# Open WebUI imports much (torch among it) before it listens: about 40 s on an idle machine.
START_TIMEOUT_S = 240.0
OFFLINE_ENV = {
    "OFFLINE_MODE": "True",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "ENABLE_VERSION_UPDATE_CHECK": "False",
    "ENABLE_OLLAMA_API": "False",
    "SCARF_NO_ANALYTICS": "true",
    "DO_NOT_TRACK": "true",
    "ANONYMIZED_TELEMETRY": "false",
    "WEBUI_SECRET_KEY": "toolchat-openwebui-test",
}


@dataclasses.dataclass(frozen=True)
class OpenWebUI:
    """A running Open WebUI: its base URL and its log."""

    base_url: str
    log: Path

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def _configured() -> bool:
    return bool(os.environ.get("TOOLCHAT_OPENWEBUI_PYTHON"))


def _wanted() -> bool:
    return _configured() and TEST_DB == "postgres"


def pytest_report_header() -> str:
    if _wanted():
        return "toolchat: openwebui tests run (TOOLCHAT_OPENWEBUI_PYTHON set)"
    if _configured():
        return "toolchat: openwebui tests left out of this pass (they run in the PostgreSQL pass)"
    return 'toolchat: openwebui tests left out (run `eval "$(.ci/openwebui.sh)"` to include them)'


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _wanted():
        return
    left_out = [item for item in items if item.get_closest_marker("openwebui") is not None]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item.get_closest_marker("openwebui") is None]


@pytest.fixture
def openwebui() -> Iterator[Callable[..., OpenWebUI]]:
    """`openwebui(base_url, key, **env)` starts Open WebUI with that OpenAI connection."""
    python = os.environ.get("TOOLCHAT_OPENWEBUI_PYTHON", "")
    if not python or not os.access(python, os.X_OK):
        service_unavailable(f"TOOLCHAT_OPENWEBUI_PYTHON={python!r} is no interpreter")
    folder = Path(tempfile.mkdtemp(prefix="toolchat-openwebui-"))
    started: list[subprocess.Popen[bytes]] = []

    def start(base_url: str, key: str, **env: str) -> OpenWebUI:
        port = free_port()
        log = folder / f"openwebui-{len(started)}.log"
        data = folder / f"data-{len(started)}"
        data.mkdir()
        environment = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", str(folder)),
            **OFFLINE_ENV,
            "DATA_DIR": str(data),
            "OPENAI_API_BASE_URL": base_url,
            "OPENAI_API_KEY": key,
            **env,
        }
        executable = str(Path(python).with_name("open-webui"))
        with log.open("wb") as output:
            process = subprocess.Popen(
                [executable, "serve", "--host", "127.0.0.1", "--port", str(port)],
                stdout=output,
                stderr=subprocess.STDOUT,
                env=environment,
                cwd=folder,
            )
        started.append(process)
        began = time.monotonic()
        try:
            wait_for_port(port, START_TIMEOUT_S)
        except TimeoutError:
            pytest.fail(
                f"Open WebUI did not listen within {START_TIMEOUT_S:g} s:\n"
                + log.read_text(errors="replace")[-2000:]
            )
        print(f"Open WebUI listened in {time.monotonic() - began:.1f} s")
        return OpenWebUI(f"http://127.0.0.1:{port}", log)

    yield start
    for process in started:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    shutil.rmtree(folder, ignore_errors=True)
