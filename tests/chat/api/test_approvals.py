"""Approving and rejecting tool calls over the REST API: the owner only, once."""

from __future__ import annotations

import json

import pytest

from chat.models import ExecutionStatus, RunEvent, RunStatus, ToolExecution
from chat.services.runs import run_start
from tests.assertions import wait_until
from tests.chat.engine.conftest import wait_for_run
from tests.factories import ConversationFactory
from tests.llm_server import text_reply, tool_calls_reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def waiting(llm_server, conversation):
    """A run paused on one call of a tool that requires approval."""
    llm_server.push(
        tool_calls_reply([("launch_rocket", '{"target": "the moon"}')]), text_reply("Done.")
    )
    run = run_start(conversation=conversation, content="launch it")
    wait_until(
        lambda: ToolExecution.objects.filter(
            run=run, status=ExecutionStatus.AWAITING_APPROVAL
        ).exists(),
        what="the call to wait for approval",
    )
    return ToolExecution.objects.get(run=run)


def url(execution, action: str) -> str:
    return f"/api/v1/tool-executions/{execution.pk}/{action}/"


def test_approve_runs_the_call_and_answers_its_audit_row(api, waiting, user):
    response = api.post(url(waiting, "approve"), {"reason": "go ahead"}, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["id"] == str(waiting.pk)
    assert body["approved_by_id"] == user.pk
    assert body["decision_reason"] == "go ahead"
    assert body["decided_at"]
    run = wait_for_run(waiting.run)
    assert run.status == RunStatus.COMPLETED, run.error
    waiting.refresh_from_db()
    assert waiting.status == ExecutionStatus.SUCCEEDED


def test_reject_answers_the_call_with_the_reason(api, waiting):
    response = api.post(url(waiting, "reject"), {"reason": "not today"}, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["status"] == "rejected"
    assert wait_for_run(waiting.run).status == RunStatus.COMPLETED


def test_a_second_decision_is_a_409_with_the_first(api, waiting, conversation):
    first = api.post(url(waiting, "reject"), {"reason": "no"}, format="json")
    assert first.status_code == 200

    response = api.post(url(waiting, "approve"), {}, format="json")

    assert response.status_code == 409
    assert response.json()["code"] == "conflict"
    details = response.json()["details"]
    assert (details["status"], details["reason"]) == ("rejected", "no")
    # The time of the decision, written the one way every answer writes a time.
    assert details["decided_at"] == first.json()["decided_at"]
    assert details["decided_at"].endswith("Z")
    wait_for_run(waiting.run)
    messages = api.get(f"/api/v1/conversations/{conversation.pk}/messages/").json()["results"]
    assert all(m["created_at"].endswith("Z") for m in messages)


def test_another_users_call_is_not_found_and_stays_waiting(other_api, waiting, api):
    for action in ("approve", "reject"):
        response = other_api.post(url(waiting, action), {}, format="json")
        assert response.status_code == 404
    waiting.refresh_from_db()
    assert waiting.status == ExecutionStatus.AWAITING_APPROVAL
    api.post(url(waiting, "reject"), {}, format="json")
    wait_for_run(waiting.run)


@pytest.mark.parametrize(
    "body",
    [{"reason": 7}, {"reason": "x" * 2001}, {"reason": "a\x00b"}, {"reasons": "typo"}],
    ids=["type", "size", "nul", "unknown key"],
)
def test_a_bad_reason_is_a_400_and_decides_nothing(api, waiting, body):
    response = api.post(url(waiting, "reject"), body, format="json")

    assert response.status_code == 400, response.content
    waiting.refresh_from_db()
    assert waiting.status == ExecutionStatus.AWAITING_APPROVAL
    api.post(url(waiting, "reject"), {}, format="json")
    wait_for_run(waiting.run)


# --- approve with other arguments, for the conversation; the inbox -----------------------


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("TOOLCHAT_TEST_LEDGER", str(path))
    return path


def launched(ledger) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


def waiting_call(llm_server, conversation, target: str = "the moon") -> ToolExecution:
    """A run paused on a call; the model's answer after the decision is the caller's to push."""
    llm_server.push(tool_calls_reply([("launch_rocket", f'{{"target": "{target}"}}')]))
    run = run_start(conversation=conversation, content=f"launch at {target}")
    wait_until(
        lambda: ToolExecution.objects.filter(
            run=run, status=ExecutionStatus.AWAITING_APPROVAL
        ).exists(),
        what="the call to wait for approval",
    )
    return ToolExecution.objects.get(run=run)


def test_approved_with_other_arguments_the_tool_runs_with_them_and_the_model_reads_them(
    api, waiting, llm_server, ledger
):
    response = api.post(url(waiting, "approve"), {"arguments": {"target": "mars"}}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["arguments"], body["approved_arguments"]) == (
        {"target": "the moon"},
        {"target": "mars"},
    )
    run = wait_for_run(waiting.run)
    assert run.status == RunStatus.COMPLETED, run.error
    assert launched(ledger) == ["launched mars"]
    sent = llm_server.requests[1]["messages"]
    asked = next(m for m in sent if m.get("tool_calls"))
    assert json.loads(asked["tool_calls"][0]["function"]["arguments"]) == {"target": "mars"}
    decided = RunEvent.objects.get(run=run, type="tool_call.approval_decided")
    assert decided.data["arguments"] == {"target": "mars"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"arguments": {"target": 5}}, "arguments.target"),
        ({"arguments": {}}, "arguments.target"),
        ({"arguments": "mars"}, "arguments"),
        ({"scope": "forever"}, "scope"),
        ({"match_arguments": "yes"}, "match_arguments"),
    ],
)
def test_a_bad_approval_is_a_400_naming_the_field_and_decides_nothing(
    api, waiting, ledger, body, field
):
    response = api.post(url(waiting, "approve"), body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    waiting.refresh_from_db()
    assert waiting.status == ExecutionStatus.AWAITING_APPROVAL
    assert launched(ledger) == []
    api.post(url(waiting, "reject"), {}, format="json")
    wait_for_run(waiting.run)


def test_a_rejection_takes_no_arguments_or_scope(api, waiting):
    response = api.post(url(waiting, "reject"), {"scope": "conversation"}, format="json")
    assert response.status_code == 400
    api.post(url(waiting, "reject"), {}, format="json")
    wait_for_run(waiting.run)


def test_approved_for_the_conversation_later_calls_run_without_asking_until_withdrawn(
    api, waiting, llm_server, conversation, ledger
):
    response = api.post(url(waiting, "approve"), {"scope": "conversation"}, format="json")
    assert response.status_code == 200, response.content
    standing = response.json()["standing_approval"]
    assert standing is not None
    wait_for_run(waiting.run)

    listed = api.get(f"/api/v1/conversations/{conversation.pk}/standing-approvals/").json()
    assert [(s["id"], s["tool"], s["arguments"]) for s in listed] == [
        (standing, "launch_rocket", None)
    ]
    # the next call of the tool, with other arguments, runs at once
    llm_server.push(
        tool_calls_reply([("launch_rocket", '{"target": "venus"}')]), text_reply("Launched.")
    )
    run = wait_for_run(run_start(conversation=conversation, content="and venus"))
    assert run.status == RunStatus.COMPLETED, run.error
    later = ToolExecution.objects.get(run=run)
    assert (later.status, later.standing_approval_id) == (ExecutionStatus.SUCCEEDED, standing)
    assert later.approved_by == conversation.owner
    assert "standing approval" in later.decision_reason
    assert launched(ledger) == ["launched the moon", "launched venus"]

    path = f"/api/v1/conversations/{conversation.pk}/standing-approvals/{standing}/"
    assert api.delete(path).status_code == 204
    assert api.delete(path).status_code == 404
    asked = waiting_call(llm_server, conversation, "pluto")
    assert asked.standing_approval_id is None
    llm_server.push(text_reply("Not launched."))
    api.post(url(asked, "reject"), {}, format="json")
    wait_for_run(asked.run)


def test_a_standing_approval_for_these_arguments_asks_again_for_others(
    api, waiting, llm_server, conversation, ledger
):
    body = {"scope": "conversation", "match_arguments": True}
    assert api.post(url(waiting, "approve"), body, format="json").status_code == 200
    wait_for_run(waiting.run)
    llm_server.push(
        tool_calls_reply([("launch_rocket", '{"target": "the moon"}')]), text_reply("Again.")
    )
    again = wait_for_run(run_start(conversation=conversation, content="once more"))
    assert ToolExecution.objects.get(run=again).status == ExecutionStatus.SUCCEEDED
    other = waiting_call(llm_server, conversation, "mars")
    assert other.status == ExecutionStatus.AWAITING_APPROVAL
    llm_server.push(text_reply("Not launched."))
    api.post(url(other, "reject"), {}, format="json")
    wait_for_run(other.run)


def test_another_users_standing_approvals_are_not_found(other_api, api, waiting, conversation):
    api.post(url(waiting, "approve"), {"scope": "conversation"}, format="json")
    wait_for_run(waiting.run)
    standing = ToolExecution.objects.get(pk=waiting.pk).standing_approval_id
    base = f"/api/v1/conversations/{conversation.pk}/standing-approvals/"
    assert other_api.get(base).status_code == 404
    assert other_api.delete(f"{base}{standing}/").status_code == 404
    assert api.get(base).json()[0]["id"] == standing


def test_the_inbox_lists_your_waiting_calls_newest_first_and_staff_see_all(
    api, other_api, llm_server, conversation, other_user, user
):
    first = waiting_call(llm_server, conversation, "the moon")
    second = waiting_call(llm_server, ConversationFactory(owner=user, title="Two"), "mars")
    theirs = waiting_call(llm_server, ConversationFactory(owner=other_user), "venus")

    mine = api.get("/api/v1/approvals/").json()["results"]
    assert [a["id"] for a in mine] == [str(second.pk), str(first.pk)]
    assert mine[0]["conversation_title"] == "Two"
    assert (mine[0]["tool"], mine[0]["arguments"]) == ("launch_rocket", {"target": "mars"})
    assert mine[0]["requested_at"]
    assert mine[0]["waited_ms"] >= 0
    assert mine[0]["run_id"] == str(second.run_id)
    assert [a["id"] for a in other_api.get("/api/v1/approvals/").json()["results"]] == [
        str(theirs.pk)
    ]
    assert api.get("/api/v1/approvals/?all=1").status_code == 403
    user.is_staff = True
    user.save()
    everyone = api.get("/api/v1/approvals/?all=1").json()["results"]
    assert {a["id"] for a in everyone} == {str(first.pk), str(second.pk), str(theirs.pk)}
    assert {a["owner"] for a in everyone} == {user.username, other_user.username}

    llm_server.push(text_reply("One."), text_reply("Two."), text_reply("Three."))
    api.post(url(first, "approve"), {}, format="json")
    assert [a["id"] for a in api.get("/api/v1/approvals/").json()["results"]] == [str(second.pk)]
    api.post(url(second, "reject"), {}, format="json")
    other_api.post(url(theirs, "reject"), {}, format="json")
    for execution in (first, second, theirs):
        wait_for_run(execution.run)
