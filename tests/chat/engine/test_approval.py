"""Tools that require approval wait for a person's decision, and only then run."""

from __future__ import annotations

import json
import os

import pytest

from chat.models import ExecutionStatus, Message, Role, RunEvent, RunStatus, ToolExecution
from chat.selectors import history_for_model
from chat.services.runs import run_start
from tests.assertions import assert_valid_history, wait_until
from tests.chat.engine.conftest import wait_for_run
from tests.llm_server import text_reply, tool_calls_reply

pytestmark = pytest.mark.django_db(transaction=True)


def awaiting(run):
    wait_until(
        lambda: type(run).objects.get(pk=run.pk).status == RunStatus.AWAITING_APPROVAL,
        what="the run to wait for approval",
    )
    run.refresh_from_db()
    return run


def test_a_tool_that_requires_approval_does_not_run_without_a_decision(
    llm_server, conversation, tmp_path, monkeypatch
):
    ledger = tmp_path / "ledger.txt"
    monkeypatch.setenv("TOOLCHAT_TEST_LEDGER", str(ledger))
    llm_server.push(tool_calls_reply([("launch_rocket", '{"target": "the moon"}')]))
    run = awaiting(run_start(conversation=conversation, content="launch it"))

    execution = ToolExecution.objects.get(run=run)
    assert execution.status == ExecutionStatus.AWAITING_APPROVAL
    assert not ledger.exists() or ledger.read_text() == ""  # it did not run
    assert len(llm_server.requests) == 1  # and the model was not called again
    requested = RunEvent.objects.get(run=run, type="tool_call.approval_requested")
    assert requested.data["execution_id"] == str(execution.pk)
    assert requested.data["name"] == "launch_rocket"
    assert requested.data["arguments"] == {"target": "the moon"}
    # The history stays valid while it waits: the call is answered as pending.
    assert_valid_history(history_for_model(conversation=conversation))
    assert run.lease is None  # nothing holds the run while a person decides


def launched(ledger) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("TOOLCHAT_TEST_LEDGER", str(path))
    return path


def test_an_approved_call_runs_once_and_the_turn_ends_with_an_answer(
    llm_server, conversation, user, ledger
):
    from chat.services.approvals import tool_call_decide

    llm_server.push(
        tool_calls_reply([("launch_rocket", '{"target": "the moon"}')]),
        text_reply("The rocket is on its way to the moon."),
    )
    run = awaiting(run_start(conversation=conversation, content="launch it"))
    execution = ToolExecution.objects.get(run=run)
    tool_call_decide(execution_id=execution.pk, user=user, approve=True, reason="go")

    run = wait_for_run(run)
    assert run.status == RunStatus.COMPLETED, run.error
    assert launched(ledger) == ["launched the moon"]
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.SUCCEEDED
    assert (execution.approved_by, execution.decision_reason) == (user, "go")
    assert execution.decided_at is not None
    assert Message.objects.filter(run=run, role=Role.ASSISTANT).last().content == (
        "The rocket is on its way to the moon."
    )
    assert_valid_history(history_for_model(conversation=conversation))
    decided = RunEvent.objects.get(run=run, type="tool_call.approval_decided")
    assert decided.data["approved"] is True


def test_a_rejected_call_never_runs_and_the_model_reads_why(llm_server, conversation, user, ledger):
    from chat.services.approvals import tool_call_decide

    llm_server.push(
        tool_calls_reply([("launch_rocket", '{"target": "the moon"}')]),
        text_reply("Understood, no launch."),
    )
    run = awaiting(run_start(conversation=conversation, content="launch it"))
    execution = ToolExecution.objects.get(run=run)
    tool_call_decide(execution_id=execution.pk, user=user, approve=False, reason="too far")

    run = wait_for_run(run)
    assert run.status == RunStatus.COMPLETED, run.error
    assert launched(ledger) == []
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.REJECTED
    tool_message = next(m for m in llm_server.requests[1]["messages"] if m["role"] == "tool")
    assert "rejected by the user: too far" in json.loads(tool_message["content"])["error"]
    assert_valid_history(history_for_model(conversation=conversation))


def test_in_a_mixed_step_the_free_call_runs_while_the_other_waits(
    llm_server, conversation, user, ledger
):
    from chat.services.approvals import tool_call_decide

    llm_server.push(
        tool_calls_reply(
            [("calculator", '{"expression": "6*7"}'), ("launch_rocket", '{"target": "mars"}')]
        ),
        text_reply("42, and launched."),
    )
    run = awaiting(run_start(conversation=conversation, content="compute and launch"))
    wait_until(
        ToolExecution.objects.filter(
            run=run, name="calculator", status=ExecutionStatus.SUCCEEDED
        ).exists,
        what="the calculator to run while the launch waits",
    )
    run.refresh_from_db()
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert len(llm_server.requests) == 1
    held = ToolExecution.objects.get(run=run, name="launch_rocket")
    tool_call_decide(execution_id=held.pk, user=user, approve=True)
    run = wait_for_run(run)
    assert run.status == RunStatus.COMPLETED, run.error
    assert launched(ledger) == ["launched mars"]
    assert_valid_history(history_for_model(conversation=conversation))


def test_a_call_is_decided_once_and_only_by_its_owner(llm_server, conversation, user, other_user):
    from chat.exceptions import Conflict, ToolExecutionNotFound
    from chat.services.approvals import tool_call_decide

    llm_server.push(
        tool_calls_reply([("launch_rocket", '{"target": "venus"}')]), text_reply("No launch.")
    )
    run = awaiting(run_start(conversation=conversation, content="launch it"))
    execution = ToolExecution.objects.get(run=run)
    with pytest.raises(ToolExecutionNotFound):
        tool_call_decide(execution_id=execution.pk, user=other_user, approve=True)
    with pytest.raises(ToolExecutionNotFound):
        tool_call_decide(execution_id="not-a-uuid", user=user, approve=True)
    tool_call_decide(execution_id=execution.pk, user=user, approve=False, reason="no")
    with pytest.raises(Conflict) as second:
        tool_call_decide(execution_id=execution.pk, user=user, approve=True)
    assert second.value.details["status"] == ExecutionStatus.REJECTED
    assert second.value.details["reason"] == "no"
    assert wait_for_run(run).status == RunStatus.COMPLETED


def test_cancelling_a_waiting_run_answers_its_waiting_call(llm_server, conversation, ledger):
    from chat.services.runs import run_cancel

    llm_server.push(tool_calls_reply([("launch_rocket", '{"target": "pluto"}')]))
    run = awaiting(run_start(conversation=conversation, content="launch it"))
    run_cancel(run=run)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert ToolExecution.objects.get(run=run).status == ExecutionStatus.CANCELLED
    assert launched(ledger) == []
    assert_valid_history(history_for_model(conversation=conversation))


def test_an_approval_nobody_gives_in_time_expires_as_a_rejection(
    llm_server, conversation, settings, ledger
):
    from chat.engine.approvals import approvals_expire

    settings.TOOL_APPROVAL_TIMEOUT_S = 0.3
    llm_server.push(
        tool_calls_reply([("launch_rocket", '{"target": "saturn"}')]),
        text_reply("Nobody confirmed, so nothing was launched."),
    )
    run = awaiting(run_start(conversation=conversation, content="launch it"))
    # The sweep (runs_recover, every TOOLCHAT_RECOVER_S) expires it once it is old enough.
    wait_until(approvals_expire, what="the approval to expire")

    run = wait_for_run(run)
    assert run.status == RunStatus.COMPLETED, run.error
    execution = ToolExecution.objects.get(run=run)
    assert execution.status == ExecutionStatus.REJECTED
    assert (execution.decision_reason, execution.approved_by) == ("expired", None)
    assert launched(ledger) == []
    tool_message = next(m for m in llm_server.requests[1]["messages"] if m["role"] == "tool")
    assert "rejected by the user: expired" in json.loads(tool_message["content"])["error"]


def test_a_rule_of_the_arguments_decides_which_calls_wait(llm_server, conversation, user):
    from chat.services.approvals import tool_call_decide
    from tests.factories import ResourceFactory
    from tools.models import Resource

    notes = [ResourceFactory(owner=user, kind="note", title=f"note {n}") for n in range(3)]
    one = json.dumps({"note_ids": [str(notes[0].pk)]})
    two = json.dumps({"note_ids": [str(notes[1].pk), str(notes[2].pk)]})
    llm_server.push(
        tool_calls_reply([("delete_notes", one)]),
        text_reply("Deleted one."),
        tool_calls_reply([("delete_notes", two)]),
        text_reply("Deleted two."),
    )
    # One note: deleted at once.
    run = wait_for_run(run_start(conversation=conversation, content="delete note 0"))
    assert run.status == RunStatus.COMPLETED, run.error
    assert Resource.objects.count() == 2
    # Two notes: the call waits, says what it will do, and deletes once approved.
    run = awaiting(run_start(conversation=conversation, content="delete the other two"))
    requested = RunEvent.objects.get(run=run, type="tool_call.approval_requested")
    assert requested.data["description"] == "Delete 2 notes for good."
    assert Resource.objects.count() == 2
    execution = ToolExecution.objects.get(run=run)
    tool_call_decide(execution_id=execution.pk, user=user, approve=True)
    assert wait_for_run(run).status == RunStatus.COMPLETED
    assert not Resource.objects.exists()


def test_the_audit_page_and_the_admin_say_who_decided_and_how_long_the_call_waited(
    llm_server, conversation, user, admin_client
):
    from chat.services.approvals import tool_call_decide

    llm_server.push(
        tool_calls_reply([("launch_rocket", '{"target": "io"}')]), text_reply("Not launched.")
    )
    run = awaiting(run_start(conversation=conversation, content="launch it"))
    execution = ToolExecution.objects.get(run=run)
    tool_call_decide(execution_id=execution.pk, user=user, approve=False, reason="not io")
    wait_for_run(run)
    execution.refresh_from_db()

    audit = admin_client.get(f"/audit/runs/{run.pk}/").content.decode()
    assert f"rejected by {user.get_username()} after {execution.approval_wait_ms:,} ms" in audit
    assert "Decision: not io" in audit
    admin = admin_client.get(f"/admin/chat/toolexecution/{execution.pk}/change/").content.decode()
    assert "rejected" in admin
    assert f"{execution.approval_wait_ms:,} ms" in admin


# Rounds of the race below: 20 in `make test`, 100 with TOOLCHAT_LONG_TESTS=1 (`make test-long`).
RACE_ROUNDS = 100 if os.environ.get("TOOLCHAT_LONG_TESTS", "") in {"1", "true", "yes"} else 20


@pytest.mark.postgres
def test_approve_edit_reject_and_cancel_at_once_leave_a_record_that_says_what_ran(
    llm_server, user, ledger
):
    """Each round, an approval, an approval with other arguments, a rejection and a cancel
    race for one waiting call of a tool with a side effect. Exactly one decision wins,
    nothing runs twice, and the record (the call's row and the tool message the model and
    the user read) says whether it ran, and with which arguments."""
    import threading

    from chat.exceptions import Conflict
    from chat.services.approvals import tool_call_decide
    from chat.services.runs import run_cancel
    from tests.assertions import tool_stopped
    from tests.factories import ConversationFactory

    for round_ in range(RACE_ROUNDS):
        conversation = ConversationFactory(owner=user)
        llm_server.push(tool_calls_reply([("launch_rocket", f'{{"target": "t{round_}"}}')]))
        run = awaiting(run_start(conversation=conversation, content="launch it"))
        execution = ToolExecution.objects.get(run=run)
        start = threading.Barrier(4)
        won: list[str] = []

        def act(name, action, start=start, won=won):
            start.wait()
            try:
                action()
                won.append(name)
            except Conflict:
                pass
            finally:
                from django.db import connection

                connection.close()

        actions = {
            "approve": lambda e=execution: tool_call_decide(
                execution_id=e.pk, user=user, approve=True
            ),
            "edit": lambda e=execution, n=round_: tool_call_decide(
                execution_id=e.pk, user=user, approve=True, arguments={"target": f"e{n}"}
            ),
            "reject": lambda e=execution: tool_call_decide(
                execution_id=e.pk, user=user, approve=False, reason="no"
            ),
            "cancel": lambda r=run: run_cancel(run=r),
        }
        threads = [threading.Thread(target=act, args=item) for item in actions.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wait_for_run(run)
        wait_until(tool_stopped("launch_rocket"), what="the tool to end")
        as_asked, as_edited = f"launched t{round_}", f"launched e{round_}"
        done = launched(ledger)  # final: the tool has ended
        ran = as_asked in done or as_edited in done
        assert done.count(as_asked) + done.count(as_edited) <= 1  # never twice, one way
        if ran:
            assert ("edit" in won) == (as_edited in done), (round_, won)
        if ran:
            # Its result is stored by the task that ran it, once the tool has returned.
            wait_until(
                lambda e=execution: (
                    ToolExecution.objects.get(pk=e.pk).status == ExecutionStatus.SUCCEEDED
                ),
                what=f"round {round_} ({won}): the record to say the call ran",
            )
        execution.refresh_from_db()
        answer = Message.objects.get(run=run, role=Role.TOOL)
        if ran:
            assert "Launched at" in answer.content, (round_, won)
        else:
            assert execution.status in (ExecutionStatus.REJECTED, ExecutionStatus.CANCELLED)
            assert "Launched at" not in answer.content
        assert won.count("approve") + won.count("edit") + won.count("reject") <= 1, won
        if ran:
            # The row keeps what the model asked; what ran is beside it when it was edited.
            assert execution.arguments == {"target": f"t{round_}"}
            edited = {"target": f"e{round_}"} if "edit" in won else None
            assert execution.approved_arguments == edited
        assert_valid_history(history_for_model(conversation=conversation))


def test_the_run_keeps_its_wait_for_a_person_apart_from_its_own_time(
    llm_server, conversation, user, ledger
):
    import time

    from chat.services.approvals import tool_call_decide
    from chat.services.runs import run_cancel

    llm_server.push(
        tool_calls_reply([("launch_rocket", '{"target": "the moon"}')]),
        text_reply("On its way."),
        tool_calls_reply([("launch_rocket", '{"target": "mars"}')]),
    )
    run = awaiting(run_start(conversation=conversation, content="launch it"))
    time.sleep(0.3)  # a person reads the request
    execution = ToolExecution.objects.get(run=run)
    tool_call_decide(execution_id=execution.pk, user=user, approve=True)
    run = wait_for_run(run)
    execution.refresh_from_db()
    assert run.approval_wait_ms == execution.approval_wait_ms
    assert 300 <= run.approval_wait_ms < run.latency_ms
    # A run cancelled while it waits waited until the cancel.
    second = awaiting(run_start(conversation=conversation, content="and mars"))
    time.sleep(0.2)  # a person reads it, then cancels: the wait asserted below
    run_cancel(run=second)
    second.refresh_from_db()
    assert second.approval_wait_ms is not None
    assert 200 <= second.approval_wait_ms <= second.latency_ms
