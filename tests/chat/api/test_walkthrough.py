"""docs/api.md's curl walkthrough runs as written against a real server.

The test takes the fenced ```bash blocks of the document in order, runs them
as one bash script against uvicorn (the `asgi_server` fixture) with the
document's own `API` variable pointed at it, and checks what they print.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.assertions import assert_paired
from tests.chat.api.conftest import MESSAGES
from tests.factories import UserFactory
from tests.plugins.servers import database_url, server_environment
from tests.plugins.services import service_unavailable

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "api.md"


def bash_blocks() -> list[str]:
    return [block for block, _ in blocks_and_outputs()]


def blocks_and_outputs() -> list[tuple[str, str | None]]:
    """Each ```bash block, with the fenced block right after it that shows what it prints."""
    text = DOC.read_text()
    fences = list(re.finditer(r"^```(\w*)\n(.*?)^```\n", text, flags=re.MULTILINE | re.DOTALL))
    pairs: list[tuple[str, str | None]] = []
    for fence, after in zip(fences, [*fences[1:], None], strict=True):
        if fence.group(1) != "bash":
            continue
        shown = None
        if (
            after is not None
            and after.group(1) in ("", "json")
            and not text[fence.end() : after.start()].strip()
        ):
            shown = after.group(2)
        pairs.append((fence.group(2), shown))
    return pairs


def test_the_walkthrough_has_every_step():
    script = "\n".join(bash_blocks())
    for step in (
        "drf_create_token demo",
        'POST "$API/conversations/"',
        "?wait=true",
        "Accept: text/event-stream",
        '"$API/conversations/$CONVERSATION/messages/" -H',
        "/replay/",
        "/compare/?with=",
        "/export/",
    ):
        assert step in script, step


@pytest.mark.postgres
def test_the_walkthrough_runs_as_written(asgi_server):
    for tool in ("bash", "curl", "jq"):
        if shutil.which(tool) is None:
            service_unavailable(f"the walkthrough needs {tool}")
    from django.db import connection

    UserFactory(username="demo")  # what `make run` creates
    env = server_environment(
        DATABASE_URL=database_url(connection.settings_dict),
        DATABASE_POOL="0",
        API=f"{asgi_server}/api/v1",
    )
    script = "set -euo pipefail\n" + "\n".join(bash_blocks())
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    out = result.stdout
    check_shown_outputs(env)

    assert re.search(r"^conversation [0-9a-f-]{36}$", out, flags=re.MULTILINE), out
    documents = list(_json_documents(out))
    waited = next(d for d in documents if isinstance(d, dict) and "answer" in d)
    assert waited["status"] == "completed"
    assert "84" in waited["answer"]
    assert waited["tools"][0]["name"] == "calculator"

    events = re.findall(r"^event: (\S+)$", out, flags=re.MULTILINE)
    assert events[:2] == ["message.created", "run.started"]  # the user's message first
    assert events[-1] == "run.completed"
    assert "tool_call.completed" in events

    history = [
        d
        for d in documents
        if isinstance(d, dict)
        and set(d) <= {"role", "content", "tool_calls", "tool_call_id"}
        and "role" in d
    ]
    assert [m["role"] for m in history][:4] == ["user", "assistant", "tool", "assistant"]
    MESSAGES.validate_python(history)
    assert_paired(history)

    run = next(d for d in documents if isinstance(d, dict) and "model_calls" in d)
    assert run["status"] == "completed"
    # The offline model (make run's) also writes the follow-up suggestions: a third call.
    assert [c["purpose"] for c in run["model_calls"]] == ["tools", "compose", "suggest"]

    exported = [d for d in documents if isinstance(d, dict) and set(d) == {"messages", "tools"}]
    # Each example starts with the system prompt its run sent (TOOLCHAT_SYSTEM_PROMPT's default).
    assert [line["messages"] for line in exported] == [5, 9]


def check_shown_outputs(env: dict[str, str]) -> None:
    """What each block prints is what the document shows after it (streamed deltas counted once)."""
    marked = "\n".join(
        f"echo '@@block {index}@@'\n{block}"
        for index, (block, _) in enumerate(blocks_and_outputs())
    )
    result = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + marked],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    printed = re.split(r"^@@block \d+@@\n", result.stdout, flags=re.MULTILINE)[1:]
    for (block, shown), out in zip(blocks_and_outputs(), printed, strict=True):
        if shown is None:
            continue
        if shown.lstrip().startswith("{"):
            assert json.loads(out) == json.loads(shown), (block, out)
        else:
            lines = [line for line in out.splitlines() if line]
            deduplicated = [line for i, line in enumerate(lines) if i == 0 or line != lines[i - 1]]
            assert deduplicated == shown.splitlines(), (block, out)


def _json_documents(text: str):
    """Every JSON document in the output (pretty-printed or one per line), in order."""
    decoder = json.JSONDecoder()
    index = 0
    while index < len(text):
        if text[index] in "{[":
            try:
                document, end = decoder.raw_decode(text, index)
            except ValueError:
                index += 1
                continue
            yield document
            index = end
        else:
            index += 1
