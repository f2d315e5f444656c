"""The LiteLLM proxy in front of a model server, for the tests marked `litellm`.

Many teams reach their models through the LiteLLM proxy, a gateway that
retries and relays errors its own way. The proxy runs from its own virtualenv,
so that the project's stays small: TOOLCHAT_LITELLM_PYTHON names that
interpreter (one with `litellm[proxy]`); `.ci/litellm.sh` installs it and
prints the variable. The `litellm_proxy` fixture starts a proxy on a free
loopback port in front of a given upstream base URL, once per upstream and
session, with a written config file and a master key (the API key its
clients send), and with every feature that would reach the internet turned
off: telemetry, the remote price list, the docs pages, the admin UI. A
missing interpreter or package is a skip with the reason; with
REQUIRE_SERVICES=1 it is a failure. A run where the variable is not set leaves
these tests out (deselected, and said in the report's header); .ci/run sets
it. They run in the SQLite pass only: the proxy is under test, not the
database, and a second pass would double their minutes. How long each proxy
took to start is said in the report's summary.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.plugins.services import TEST_DB, free_port, service_unavailable, wait_for_port

# Importing the proxy takes about 10 s on an idle machine; a loaded one may take longer.
START_TIMEOUT_S = 120.0
MASTER_KEY = "sk-toolchat-litellm-master"
UPSTREAM_KEY = "sk-toolchat-upstream"
# The proxy's environment: nothing of ours (no DATABASE_URL or REDIS_URL, which it would
# use), and every feature that would reach the internet turned off.
OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # its price list: the packaged copy
    "LITELLM_TELEMETRY_DISABLED": "True",  # its usage reports (LITELLM_TELEMETRY, older)
    "LITELLM_TELEMETRY": "False",
    "NO_DOCS": "True",
    "NO_REDOC": "True",
    "DISABLE_ADMIN_UI": "True",
    "HF_HUB_OFFLINE": "1",  # tokenizers it might fetch for counting
    "TRANSFORMERS_OFFLINE": "1",
    "LITELLM_LOG": "INFO",
}

# Exits non-zero unless litellm and what its `proxy` extra brings are installed.
PROXY_INSTALLED = (
    "import importlib.metadata as m\n"
    "for name in ('litellm', 'litellm-proxy-extras', 'fastapi', 'uvicorn'):\n"
    "    m.version(name)"
)

_started: list[tuple[str, float]] = []  # (model, seconds to listen), for the summary


@dataclasses.dataclass(frozen=True)
class LiteLLMProxy:
    """A running proxy: its base URL, the key its clients send, its start time and log."""

    base_url: str
    master_key: str
    start_s: float
    log: Path


def _configured() -> bool:
    return bool(os.environ.get("TOOLCHAT_LITELLM_PYTHON"))


def _wanted() -> bool:
    return _configured() and TEST_DB == "sqlite"


def pytest_report_header() -> str:
    if _wanted():
        return "toolchat: litellm tests run (TOOLCHAT_LITELLM_PYTHON set)"
    if _configured():
        return "toolchat: litellm tests left out of this pass (they run in the SQLite pass)"
    return 'toolchat: litellm tests left out (run `eval "$(.ci/litellm.sh)"` to include them)'


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _wanted():
        return
    left_out = [item for item in items if item.get_closest_marker("litellm") is not None]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item.get_closest_marker("litellm") is None]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for model, seconds in _started:
        terminalreporter.write_line(
            f"toolchat: LiteLLM proxy for {model} listened in {seconds:.1f} s"
        )


def _missing() -> str:
    """Why the proxy cannot be started here, or ""."""
    python = os.environ.get("TOOLCHAT_LITELLM_PYTHON", "")
    if not python:
        return (
            "TOOLCHAT_LITELLM_PYTHON is not set; "
            'run `eval "$(.ci/litellm.sh)"` to install litellm[proxy]'
        )
    if not os.access(python, os.X_OK):
        return f"TOOLCHAT_LITELLM_PYTHON={python} is not an executable interpreter"
    # The installed packages' metadata, not an import: importing litellm takes seconds.
    found = subprocess.run(
        [python, "-c", PROXY_INSTALLED],
        capture_output=True,
        timeout=60,
        check=False,
    )
    if found.returncode:
        return f"{python} has no litellm[proxy] (run .ci/litellm.sh)"
    return ""


def proxy_config(upstream: str, model: str) -> dict[str, object]:
    """The proxy's config: `model` served from the OpenAI-compatible server at `upstream`."""
    return {
        "model_list": [
            {
                "model_name": model,
                "litellm_params": {
                    "model": f"openai/{model}",
                    "api_base": upstream,
                    "api_key": UPSTREAM_KEY,
                },
            }
        ],
        "general_settings": {"master_key": MASTER_KEY},
    }


@pytest.fixture(scope="session")
def litellm_proxy() -> Iterator[Callable[[str, str], LiteLLMProxy]]:
    """Start (once per upstream and model) a LiteLLM proxy in front of an upstream server.

    `litellm_proxy(upstream_base_url, model)` returns the running proxy; every
    proxy stops when the session ends.
    """
    running: dict[tuple[str, str], tuple[LiteLLMProxy, subprocess.Popen[bytes]]] = {}
    folder = Path(tempfile.mkdtemp(prefix="toolchat-litellm-"))

    def start(upstream: str, model: str) -> LiteLLMProxy:
        if (upstream, model) in running:
            return running[upstream, model][0]
        missing = _missing()
        if missing:
            service_unavailable(missing)
        number = len(running)
        # JSON is YAML: the config is written as JSON, which the proxy reads as YAML.
        config = folder / f"config-{number}.yaml"
        config.write_text(json.dumps(proxy_config(upstream, model), indent=2))
        log = folder / f"proxy-{number}.log"
        port = free_port()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", str(folder)),
            **OFFLINE_ENV,
        }
        began = time.monotonic()
        with log.open("wb") as output:
            process = subprocess.Popen(
                [
                    os.environ["TOOLCHAT_LITELLM_PYTHON"],
                    "-m",
                    "litellm.proxy.proxy_cli",
                    "--config",
                    str(config),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                ],
                stdout=output,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=folder,
            )
        try:
            wait_for_port(port, START_TIMEOUT_S)
        except TimeoutError:
            process.kill()
            process.wait()
            pytest.fail(
                f"the LiteLLM proxy did not listen within {START_TIMEOUT_S:g} s:\n"
                + log.read_text(errors="replace")[-2000:]
            )
        proxy = LiteLLMProxy(
            base_url=f"http://127.0.0.1:{port}/v1",
            master_key=MASTER_KEY,
            start_s=time.monotonic() - began,
            log=log,
        )
        _started.append((model, proxy.start_s))
        running[upstream, model] = (proxy, process)
        return proxy

    yield start
    for _, process in running.values():
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    shutil.rmtree(folder, ignore_errors=True)
