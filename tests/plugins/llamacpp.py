"""llama-cpp-python's OpenAI-compatible server with a real small model, for `llamacpp` tests.

The server runs from its own virtualenv, so that the project's stays small:
TOOLCHAT_LLAMA_PYTHON names that interpreter (one with `llama-cpp-python[server]`)
and TOOLCHAT_LLAMA_MODEL the .gguf file (SmolLM2-135M-Instruct); `.ci/llama.sh`
builds the one and fetches the other, and prints both. The `llama_server`
fixture starts the server once per session on a free loopback port, with the
chat format that gives the model tool calls. A missing interpreter, package
or model is a skip with the reason; with REQUIRE_SERVICES=1 it is a failure.
A run where neither variable is set leaves these tests out (deselected, and
said in the report's header); .ci/run sets both. They run in the SQLite pass
only: the model server is under test, not the database, and a second pass
would double their minutes.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.plugins.services import TEST_DB, free_port, service_unavailable, wait_for_port

# Loading the model takes a few seconds; a loaded shared machine may take longer.
START_TIMEOUT_S = 180.0
# The server's threads, for an answer (its default) and for a prompt.
THREADS = max(1, (os.cpu_count() or 2) // 2)


def _configured() -> bool:
    return bool(os.environ.get("TOOLCHAT_LLAMA_PYTHON") or os.environ.get("TOOLCHAT_LLAMA_MODEL"))


def _wanted() -> bool:
    return _configured() and TEST_DB == "sqlite"


def pytest_report_header() -> str:
    if _wanted():
        return "toolchat: llamacpp tests run (TOOLCHAT_LLAMA_PYTHON / TOOLCHAT_LLAMA_MODEL set)"
    if _configured():
        return "toolchat: llamacpp tests left out of this pass (they run in the SQLite pass)"
    return 'toolchat: llamacpp tests left out (run `eval "$(.ci/llama.sh)"` to include them)'


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _wanted():
        # One server for them all: under pytest-xdist (`--dist loadgroup`) they share a worker.
        for item in items:
            if item.get_closest_marker("llamacpp") is not None:
                item.add_marker(pytest.mark.xdist_group("llamacpp"))
        return
    left_out = [item for item in items if item.get_closest_marker("llamacpp") is not None]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item.get_closest_marker("llamacpp") is None]


def _missing() -> str:
    """Why the server cannot be started here, or ""."""
    python = os.environ.get("TOOLCHAT_LLAMA_PYTHON", "")
    model = os.environ.get("TOOLCHAT_LLAMA_MODEL", "")
    if not python or not model:
        return (
            "TOOLCHAT_LLAMA_PYTHON and TOOLCHAT_LLAMA_MODEL are not both set; "
            'run `eval "$(.ci/llama.sh)"` to build llama-cpp-python[server] and fetch the model'
        )
    if not os.access(python, os.X_OK):
        return f"TOOLCHAT_LLAMA_PYTHON={python} is not an executable interpreter"
    if not Path(model).is_file():
        return f"TOOLCHAT_LLAMA_MODEL={model} is not a file"
    found = subprocess.run(
        [python, "-c", "import llama_cpp.server"], capture_output=True, timeout=60, check=False
    )
    if found.returncode:
        return f"{python} cannot import llama_cpp.server (install llama-cpp-python[server])"
    return ""


@pytest.fixture(scope="session")
def llama_server() -> Iterator[str]:
    """The base URL of a llama-cpp-python server running SmolLM2-135M-Instruct."""
    missing = _missing()
    if missing:
        service_unavailable(missing)
    port = free_port()
    with tempfile.NamedTemporaryFile(prefix="toolchat-llama-", suffix=".log") as log:
        process = subprocess.Popen(
            [
                os.environ["TOOLCHAT_LLAMA_PYTHON"],
                "-m",
                "llama_cpp.server",
                "--model",
                os.environ["TOOLCHAT_LLAMA_MODEL"],
                "--chat_format",
                "chatml-function-calling",
                "--n_ctx",
                "4096",
                # Keep evaluated prompts (a step's tools and history come back in
                # the next call): the prompt, not the answer, is most of a call here.
                "--cache",
                "true",
                "--cache_size",
                str(512 * 1024 * 1024),
                # Half the cores, for the prompt too (the server's default gives a prompt all):
                # the suite's other worker has the rest, and two threads of a prompt on a
                # 2-core machine spin-wait for each other while that worker runs. On two
                # loaded cores a first prompt with the tools took 28 s of CPU instead of 40.
                "--n_threads",
                str(THREADS),
                "--n_threads_batch",
                str(THREADS),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            try:
                wait_for_port(port, START_TIMEOUT_S)
            except TimeoutError:
                output = Path(log.name).read_text(errors="replace")[-2000:]
                pytest.fail(
                    f"llama_cpp.server did not listen within {START_TIMEOUT_S:g} s:\n{output}"
                )
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# What docs/providers.md advises for this model and server: its name, short answers,
# slow calls (a CPU shared with the suite's other worker) given time, no compose model.
LLAMA_MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture
def llama(llama_server: str, settings: Any) -> Iterator[str]:
    """The openai provider pointed at the session's llama-cpp-python server, for one test."""
    from chat.llm.limits import server_limits_reset

    settings.LLM_PROVIDER = "openai"
    settings.OPENAI_API_KEY = "sk-local"
    settings.OPENAI_BASE_URL = llama_server
    settings.LLM_MODEL = LLAMA_MODEL
    settings.LLM_COMPOSE_MODEL = ""
    settings.LLM_MAX_RETRIES = 2
    settings.LLM_MAX_TOKENS = 128
    settings.LLM_TIMEOUT_S = 120
    settings.LLM_CALL_DEADLINE_S = 300
    yield llama_server
    server_limits_reset()
