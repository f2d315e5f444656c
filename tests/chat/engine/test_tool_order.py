"""Where tool answers go, and who runs a step's single call.

The answer to a call goes right after the assistant message that asked for
it, in the order of the calls, whenever it arrives; a step's one call is run
by the run's own worker, with no task of its own.
"""

from __future__ import annotations

import pytest

from chat.models import Message, Role, RunEvent, RunStatus, ToolExecution
from chat.services.runs import run_start
from tests.assertions import assert_valid_history
from tests.chat.engine.conftest import wait_for_run
from tests.llm_server import text_reply, tool_calls_reply

pytestmark = pytest.mark.django_db(transaction=True)


def roles_and_ids(conversation) -> list[tuple[str, str | None]]:
    rows = Message.objects.filter(conversation=conversation).order_by("position")
    return [(row.role, row.tool_call_id) for row in rows]


def test_answers_follow_their_calls_in_call_order_whatever_finishes_first(llm_server, conversation):
    # The first call is slow, the second quick: the quick answer is stored first.
    llm_server.push(
        tool_calls_reply(
            [
                ("slow_step", '{"label": "slow", "seconds": 0.5}', "call_slow"),
                ("calculator", '{"expression": "2+2"}', "call_quick"),
            ]
        ),
        text_reply("Both done."),
    )
    run = wait_for_run(run_start(conversation=conversation, content="do both"))
    assert run.status == RunStatus.COMPLETED, run.error
    finished = list(
        ToolExecution.objects.filter(run=run)
        .order_by("finished_at")
        .values_list("tool_call_id", flat=True)
    )
    assert finished == ["call_quick", "call_slow"]
    assert roles_and_ids(conversation) == [
        (Role.USER, None),
        (Role.ASSISTANT, None),
        (Role.TOOL, "call_slow"),
        (Role.TOOL, "call_quick"),
        (Role.ASSISTANT, None),
    ]
    positions = list(
        Message.objects.filter(conversation=conversation)
        .order_by("position")
        .values_list("position", flat=True)
    )
    assert positions == [0, 1, 2, 3, 4]
    assert_valid_history(llm_server.requests[1]["messages"][:-1])


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "as a task"])
def test_a_single_call_gives_the_same_turn_inline_or_as_a_task(
    llm_server, conversation, settings, inline
):
    settings.TOOLCHAT_INLINE_TOOL_CALLS = inline
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "12*7"}', "call_one")]),
        text_reply("84."),
    )
    run = wait_for_run(run_start(conversation=conversation, content="what is 12*7"))
    assert run.status == RunStatus.COMPLETED, run.error
    types = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert types == [
        "message.created",  # the user's message, published with it
        "run.started",
        "message.created",
        "message.completed",
        "tool_call.started",
        "tool_call.completed",
        "tools.ended",
        "message.created",
        "message.delta",
        "message.completed",
        "run.completed",
    ]
    seqs = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    execution = ToolExecution.objects.get(run=run)
    assert (execution.status, execution.attempts, execution.result["result"]) == (
        "succeeded",
        1,
        84,
    )
    assert roles_and_ids(conversation)[2] == (Role.TOOL, "call_one")
    run.refresh_from_db()
    assert (run.steps, run.model_calls, run.lease) == (1, 2, None)
