"""The README's "What you can do after make run" sentences, each sent to the offline model.

The table is the specification: every row is posted, in order, in one
conversation, through the REST API and the whole engine (the offline model
and the built-in tools, as `make run` serves them), and the tools called and
the answer must be what the row says.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chat.models import Mode, Run
from tests.chat.api.conftest import token_client
from tests.factories import ConversationFactory

README = Path(__file__).resolve().parent.parent / "README.md"
HEADING = "### What you can do after `make run`"


def demo_rows() -> list[tuple[str, set[str], str]]:
    """(what to send, the tools it calls, what the answer says) for each row of the table."""
    section = README.read_text().split(HEADING, 1)[1].split("\n#", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("send", "") or set(cells[0]) <= {"-"}:
            continue
        tools = {name.strip() for name in cells[1].split(",") if name.strip()}
        rows.append((cells[0], tools, cells[2]))
    return rows


def test_the_readme_lists_the_demo_sentences():
    rows = demo_rows()
    assert len(rows) >= 5
    assert any(len(tools) > 1 for _, tools, _ in rows)  # a parallel step is shown
    assert any(not tools for _, tools, _ in rows)  # and an answer without tools


@pytest.mark.django_db(transaction=True)
def test_every_demo_sentence_does_what_the_readme_says(user, settings):
    assert settings.LLM_PROVIDER == "offline"
    client = token_client(user)
    conversation = ConversationFactory(owner=user, mode=Mode.TWO_PASS)
    for sent, tools, says in demo_rows():
        response = client.post(
            f"/api/v1/conversations/{conversation.id}/messages/?wait=true&timeout=60",
            {"content": sent},
            format="json",
        )
        assert response.status_code == 200, (sent, response.json())
        body = response.json()
        assert body["run"]["status"] == "completed", (sent, body["run"])
        run = Run.objects.get(pk=body["run"]["id"])
        called = [e.name for e in run.tool_executions.all()]
        assert set(called) == tools, (sent, called)
        assert all(e.status == "succeeded" for e in run.tool_executions.all()), sent
        if len(tools) > 1:
            assert run.steps == 1  # all in one step
        answer = body["message"]["content"]
        assert re.search(re.escape(says), answer, re.IGNORECASE), (sent, answer)
        assert ".." not in answer, answer
