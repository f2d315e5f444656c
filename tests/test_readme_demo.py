"""The README's "What you can do after make run" sentences, each sent to the offline model.

The table is the specification: every row is posted, in order, in one
conversation, through the REST API and the whole engine (the offline model
and the built-in tools, as `make run` serves them), and the tools called and
the answer must be what the row says. A tool marked "(approval)" must wait
for approval; the test approves it through the REST API, as a user's click
on its card does, and then checks the row's answer. A tool marked "(MCP)"
comes from mcp-server-time, started over stdio as docs/tools.md configures
it: the conversation is sent twice, without MCP servers (those rows left
out) and with the time server configured from the start.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from chat.models import ExecutionStatus, Mode, Run, RunStatus, ToolExecution
from chat.selectors import run_final_message
from tests.assertions import wait_until
from tests.chat.api.conftest import token_client
from tests.factories import ConversationFactory
from tests.stack import wait_for_run
from tests.tools.mcp.servers import time_server
from tools import mcp
from tools.mcp.config import parse_config
from tools.models import Resource

README = Path(__file__).resolve().parent.parent / "README.md"
HEADING = "### What you can do after `make run`"
# A tool's note in the table: `delete_notes (approval)`, `time__convert_time (MCP)`.
TOOL_CELL = re.compile(r"^(?P<name>[\w-]+)(?:\s*\((?P<note>[^)]*)\))?$")


@dataclass(frozen=True)
class Row:
    """One row of the table: what to send, the tools it calls, what the answer says."""

    sent: str
    tools: set[str]
    says: str
    needs_approval: set[str]
    needs_mcp: bool


def demo_rows() -> list[Row]:
    """The rows of the table, in order."""
    section = README.read_text().split(HEADING, 1)[1].split("\n#", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("send", "") or set(cells[0]) <= {"-"}:
            continue
        tools: dict[str, str] = {}
        for entry in filter(None, (part.strip() for part in cells[1].split(","))):
            match = TOOL_CELL.match(entry)
            assert match, f"a tool in the README table is not `name` or `name (note)`: {entry!r}"
            tools[match["name"]] = (match["note"] or "").strip()
        assert set(tools.values()) <= {"", "approval", "MCP"}, tools
        rows.append(
            Row(
                sent=cells[0],
                tools=set(tools),
                says=cells[2],
                needs_approval={name for name, note in tools.items() if note == "approval"},
                needs_mcp="MCP" in tools.values(),
            )
        )
    return rows


def test_the_readme_lists_the_demo_sentences():
    rows = demo_rows()
    assert len(rows) >= 5
    assert any(len(row.tools) > 1 for row in rows)  # a parallel step is shown
    assert any(not row.tools for row in rows)  # and an answer without tools
    assert any(row.needs_approval for row in rows)  # and an approval
    assert any(row.needs_mcp for row in rows)  # and a tool of an MCP server


@pytest.fixture(params=["without MCP", "with mcp-server-time"])
def with_mcp(request) -> Iterator[bool]:
    """The demo as `make run` serves it, and with the README's MCP config (mcp-server-time)."""
    if request.param == "without MCP":
        yield False
        return
    mcp.configure(
        parse_config({"mcpServers": {"time": time_server()}}, environ=os.environ),
        connect_timeout=20.0,
    )
    yield True
    mcp.unconfigure()


@pytest.mark.django_db(transaction=True)
def test_every_demo_sentence_does_what_the_readme_says(user, settings, with_mcp):
    assert settings.LLM_PROVIDER == "offline"
    client = token_client(user)
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    for row in demo_rows():
        if row.needs_mcp and not with_mcp:
            continue
        run, answer = _send(client, conversation, row)
        called = [e.name for e in run.tool_executions.all()]
        assert set(called) == row.tools, (row.sent, called)
        assert all(e.status == "succeeded" for e in run.tool_executions.all()), row.sent
        if len(row.tools) > 1:
            assert run.steps == 1  # all in one step
        assert re.search(re.escape(row.says), answer, re.IGNORECASE), (row.sent, answer)
        assert ".." not in answer, answer
        if "delete_notes" in row.tools:
            assert not Resource.objects.filter(owner=user, kind="note").exists(), row.sent


def _send(client, conversation, row: Row) -> tuple[Run, str]:
    """Post the row's message; approve what it asks approval for; the ended run and its answer."""
    if not row.needs_approval:
        response = client.post(
            f"/api/v1/conversations/{conversation.id}/messages/?wait=true&timeout=60",
            {"content": row.sent},
            format="json",
        )
        assert response.status_code == 200, (row.sent, response.json())
        body = response.json()
        assert body["run"]["status"] == "completed", (row.sent, body["run"])
        return Run.objects.get(pk=body["run"]["id"]), body["message"]["content"]
    response = client.post(
        f"/api/v1/conversations/{conversation.id}/messages/",
        {"content": row.sent},
        format="json",
    )
    assert response.status_code == 202, (row.sent, response.json())
    run = Run.objects.get(pk=response.json()["run"]["id"])
    waiting = ToolExecution.objects.filter(run=run, status=ExecutionStatus.AWAITING_APPROVAL)
    wait_until(lambda: waiting.exists(), timeout=30)
    for execution in waiting:
        assert execution.name in row.needs_approval, (row.sent, execution.name)
        approved = client.post(
            f"/api/v1/tool-executions/{execution.pk}/approve/", {}, format="json"
        )
        assert approved.status_code == 200, (row.sent, approved.json())
    run = wait_for_run(run, 60)
    assert run.status == RunStatus.COMPLETED, (row.sent, run.error)
    message = run_final_message(run=run)
    assert message is not None, row.sent
    return run, message.content
