"""Whole turns whose model answers are real providers' recorded responses.

The scripted server replays, byte for byte, the two answers a provider gave
in one recorded exchange (tests/fixtures/providers/SOURCES.md): a tool call,
then the answer after the tool's result. The run must end with that answer,
the tool's result stored, and a history the API takes back.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chat.models import Mode, Role, RunStatus
from chat.selectors import history_for_model
from chat.services.runs import run_start
from tests.assertions import assert_valid_history
from tests.chat.engine.conftest import wait_for_run
from tests.factories import ConversationFactory
from tests.llm_server import raw_reply

pytestmark = pytest.mark.django_db(transaction=True)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "providers"


def recorded(name: str):
    return raw_reply((FIXTURES / name).read_bytes(), content_type="application/json")


def test_geminis_tool_call_without_an_id_completes_a_turn(llm_server, user):
    conversation = ConversationFactory(owner=user, mode=Mode.LOOP)
    llm_server.push(
        recorded("gemini-2.5-pro_tool_call_without_id.json"),
        recorded("gemini-2.5-pro_answer_after_tool.json"),
    )
    run = wait_for_run(run_start(conversation=conversation, content="what time is it"))
    assert run.status == RunStatus.COMPLETED, run.error
    messages = list(conversation.messages.order_by("position"))
    assert messages[-1].content == "The current time is Noon."
    [call] = next(m for m in messages if m.tool_calls).tool_calls
    assert re.fullmatch(r"call_[0-9a-f]{24}", call["id"])
    tool_message = next(m for m in messages if m.role == Role.TOOL)
    assert tool_message.tool_call_id == call["id"]
    assert "UTC" in tool_message.content
    # The id of ours went back to the server with the tool's result, paired.
    sent = llm_server.requests[1]["messages"]
    assert [c["id"] for m in sent for c in m.get("tool_calls") or []] == [call["id"]]
    assert any(m.get("tool_call_id") == call["id"] for m in sent)
    assert_valid_history(history_for_model(conversation=conversation))


def test_snowflakes_answers_without_a_finish_reason_complete_a_turn(llm_server, user):
    conversation = ConversationFactory(owner=user, mode=Mode.LOOP)
    llm_server.push(
        recorded("snowflake_claude-sonnet-4-6_tool_call.json"),
        recorded("snowflake_claude-sonnet-4-6_answer_after_tool.json"),
    )
    run = wait_for_run(run_start(conversation=conversation, content="weather in Mexico City?"))
    assert run.status == RunStatus.COMPLETED, run.error
    messages = list(conversation.messages.order_by("position"))
    assert messages[-1].content == (
        "The weather in Mexico City is currently sunny with a pleasant temperature of 25\u00b0C."
    )
    [call] = next(m for m in messages if m.tool_calls).tool_calls
    assert call["id"] == "toolu_bdrk_015BgHUFs4HS1TVWWwNRNxip"
    # toolchat has no get_weather: the call is answered, so the history stays paired.
    tool_message = next(m for m in messages if m.role == Role.TOOL)
    assert tool_message.tool_call_id == call["id"]
    assert len(llm_server.requests) == 2
    assert_valid_history(history_for_model(conversation=conversation))
