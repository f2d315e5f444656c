"""Export as OpenAI fine-tuning JSONL: one line per conversation, or per run."""

from __future__ import annotations

import json

import pytest
from django.conf import settings

from chat.models import Message, Role, RunStatus
from tests.assertions import assert_paired
from tests.chat.api.conftest import MESSAGES, TOOLS, stored_turn
from tests.chat.test_history import assert_valid_openai
from tests.factories import RunFactory
from tools.registry import registry

pytestmark = pytest.mark.django_db

DEFAULT_PROMPT = settings.TOOLCHAT_SYSTEM_PROMPT


def export(api, conversation, query: str = ""):
    return api.get(f"/api/v1/conversations/{conversation.id}/export/{query}")


def lines(response) -> list[dict]:
    text = response.content.decode()
    assert text.endswith("\n") or text == ""
    return [json.loads(line) for line in text.splitlines()]


def assert_fine_tuning_line(line: dict) -> None:
    """A line OpenAI's fine-tuning takes: valid messages, paired calls, the tools they use."""
    assert set(line) <= {"messages", "tools"}
    MESSAGES.validate_python(line["messages"])
    assert_valid_openai(line["messages"])  # strict: no key the API does not know
    assert_paired(line["messages"])
    assert any(m["role"] == "assistant" for m in line["messages"])
    offered = {tool["function"]["name"] for tool in TOOLS.validate_python(line.get("tools", []))}
    called = {
        call["function"]["name"]
        for message in line["messages"]
        for call in message.get("tool_calls") or []
    }
    assert called <= offered


def test_one_line_for_the_conversation(api, conversation):
    conversation.system_prompt = "Be brief."
    conversation.save()
    stored_turn(conversation)
    stored_turn(conversation, question="And 2+2?", answer="4.")

    response = export(api, conversation)

    assert response.status_code == 200
    assert response["Content-Type"] == "application/jsonl; charset=utf-8"
    assert f'filename="conversation-{conversation.id}.jsonl"' in response["Content-Disposition"]
    (line,) = lines(response)
    assert_fine_tuning_line(line)
    roles = [m["role"] for m in line["messages"]]
    assert roles == ["system"] + ["user", "assistant", "tool", "assistant"] * 2
    assert line["messages"][0] == {"role": "system", "content": "Be brief."}
    assert line["messages"][-1] == {"role": "assistant", "content": "4."}
    assert [t["function"]["name"] for t in line["tools"]] == ["calculator", "get_current_time"]
    assert line["tools"][0] == registry.get("calculator").openai_tool()


def test_one_line_per_completed_run(api, conversation):
    stored_turn(conversation, question="first?", answer="one")
    stored_turn(conversation, question="broken?", answer="never", status=RunStatus.FAILED)
    stored_turn(conversation, question="third?", answer="three")

    first, third = lines(export(api, conversation, "?per=run"))

    for line in (first, third):
        assert_fine_tuning_line(line)
    assert first["messages"][-1]["content"] == "one"
    # The system prompt (the server's default), then the turn.
    assert first["messages"][0] == {"role": "system", "content": DEFAULT_PROMPT}
    assert len(first["messages"]) == 1 + 4
    # A later run's example carries the history before it.
    assert third["messages"][1]["content"] == "first?"
    assert third["messages"][-1]["content"] == "three"
    assert len(third["messages"]) == 1 + 12


def test_a_run_in_progress_is_left_out(api, conversation):
    stored_turn(conversation)
    active = RunFactory(conversation=conversation, status=RunStatus.RUNNING)
    Message.objects.create(
        conversation=conversation, run=active, position=4, role=Role.USER, content="pending?"
    )
    (line,) = lines(export(api, conversation))
    assert "pending?" not in [m.get("content") for m in line["messages"]]
    assert lines(export(api, conversation, "?per=run"))[0]["messages"][-1]["role"] == "assistant"


def test_an_unanswered_call_is_exported_answered(api, conversation):
    """A call whose answer was never stored (a crash) is filled in, so the line stays valid."""
    run = stored_turn(conversation)
    Message.objects.filter(run=run, role=Role.TOOL).delete()
    (line,) = lines(export(api, conversation))
    assert_fine_tuning_line(line)
    assert [m["role"] for m in line["messages"][:4]] == ["system", "user", "assistant", "tool"]
    assert "interrupted" in line["messages"][3]["content"]


def test_a_conversation_without_messages_exports_nothing(api, conversation):
    response = export(api, conversation)
    assert response.status_code == 200
    assert response.content == b""


def test_a_tool_no_longer_registered_keeps_its_name(api, conversation):
    run = stored_turn(conversation)
    run.model_call_rows.filter(purpose="tools").update(tools_offered=["retired_tool"])
    (line,) = lines(export(api, conversation))
    names = [t["function"]["name"] for t in line["tools"]]
    assert names == ["retired_tool", "calculator"]
    assert_fine_tuning_line(line)


def test_a_bad_per_is_a_400(api, conversation):
    response = export(api, conversation, "?per=message")
    assert response.status_code == 400
    assert response.json()["field"] == "per"


def test_asking_for_jsonl_works_and_its_errors_are_lines_too(api, conversation, foreign):
    stored_turn(conversation)
    ok = api.get(
        f"/api/v1/conversations/{conversation.id}/export/", HTTP_ACCEPT="application/jsonl"
    )
    assert ok.status_code == 200
    assert_fine_tuning_line(lines(ok)[0])
    theirs, _, _ = foreign
    missing = api.get(f"/api/v1/conversations/{theirs.id}/export/", HTTP_ACCEPT="application/jsonl")
    assert missing.status_code == 404
    assert lines(missing) == [{"code": "not_found", "message": "Conversation not found."}]
