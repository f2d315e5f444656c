"""Text no database column can hold (NUL, lone surrogates) from the model, a tool or a user.

PostgreSQL refuses NUL in text and JSON; no UTF-8 encoder takes a lone
surrogate. Whoever sends them, the run ends with an answer, the history stays
valid, and every stored text says where a character was replaced (U+FFFD).
"""

from __future__ import annotations

import json

import pytest

from chat.models import ExecutionStatus, Message, Role, RunEvent, RunStatus, ToolExecution
from chat.selectors import history_for_model
from chat.services.runs import run_start
from tests.assertions import assert_valid_history
from tests.chat.engine.conftest import wait_for_run
from tests.factories import ConversationFactory
from tests.llm_server import text_reply, tool_calls_reply

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = "a\x00b\ud800c"
CLEAN = "a\ufffdb\ufffdc"


def test_nul_and_surrogates_from_the_model_and_a_tool_end_in_an_answer(llm_server, user):
    conversation = ConversationFactory(owner=user)
    llm_server.push(
        tool_calls_reply(
            [("echo", json.dumps({"text": HOSTILE}), "call_\x00\ud800")], content=f"Echo {HOSTILE}"
        ),
        text_reply(f"It said {HOSTILE}."),
    )
    # The user's own text is refused with NUL or a surrogate (400, or an error on the
    # socket): what the model and the tools send cannot be refused, and is cleaned.
    run = wait_for_run(run_start(conversation=conversation, content="say something odd"))

    assert run.status == RunStatus.COMPLETED, run.error
    execution = ToolExecution.objects.get(run=run)
    assert execution.status == ExecutionStatus.SUCCEEDED
    assert execution.attempts == 1
    assert execution.result == {"echo": CLEAN, "message": f"You said: {CLEAN}"}
    assert "\x00" not in execution.tool_call_id
    answer = Message.objects.filter(run=run, role=Role.ASSISTANT).order_by("-position").first()
    assert answer.content == f"It said {CLEAN}."
    deltas = "".join(
        e.data.get("text", "") for e in RunEvent.objects.filter(run=run, type="message.delta")
    )
    assert CLEAN in deltas
    # The model was sent the cleaned text back, as a valid history.
    compose = llm_server.requests[-1]["messages"]
    tool_message = next(m for m in compose if m["role"] == "tool")
    assert json.loads(tool_message["content"])["echo"] == CLEAN
    assert_valid_history(history_for_model(conversation=conversation))


@pytest.mark.parametrize("mode", ["two_pass", "loop", "direct"])
def test_a_hostile_call_id_sent_again_and_elsewhere_never_breaks_a_run(
    llm_server, user, other_user, mode
):
    """NUL and lone surrogates in ids, the same id every turn, for two users: every run ends."""
    mine = ConversationFactory(owner=user, mode=mode)
    theirs = ConversationFactory(owner=other_user, mode=mode)
    hostile = "call_\x00\ud800"
    twins = [
        ("calculator", '{"expression": "1+1"}', "call_\x00"),
        ("calculator", '{"expression": "2+2"}', "call_\ud800"),
    ]
    turns = [
        (mine, [("calculator", '{"expression": "2*3"}', hostile)]),
        (mine, [("calculator", '{"expression": "2*4"}', hostile)]),
        (theirs, [("calculator", '{"expression": "2*5"}', hostile)]),
        (mine, twins),  # two ids of one step that differ only in what is cleaned
    ]
    for conversation, calls in turns:
        llm_server.push(tool_calls_reply(calls), text_reply("Done."), text_reply("Done."))
        run = wait_for_run(run_start(conversation=conversation, content="work it out"))
        assert run.status == RunStatus.COMPLETED, run.error
        ids = [e.tool_call_id for e in ToolExecution.objects.filter(run=run)]
        assert len(ids) == len(calls)
        assert all("\x00" not in i for i in ids)
        llm_server.clear()
    assert ToolExecution.objects.values("tool_call_id").distinct().count() == 5
    for conversation in (mine, theirs):
        assert_valid_history(history_for_model(conversation=conversation))
