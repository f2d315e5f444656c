"""Approving and rejecting tool calls over the REST API: the owner only, once."""

from __future__ import annotations

import pytest

from chat.models import ExecutionStatus, RunStatus, ToolExecution
from chat.services.runs import run_start
from tests.assertions import wait_until
from tests.chat.engine.conftest import wait_for_run
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
