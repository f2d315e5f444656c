"""Runs over the REST API: detail, events as JSON, cancel."""

from __future__ import annotations

import pytest

from chat.live.events import event_publish
from chat.models import ExecutionStatus, Message, Role, Run, RunStatus, ToolExecution
from tests.factories import RunFactory, event_make

pytestmark = pytest.mark.django_db


def run_url(run, suffix: str = "") -> str:
    return f"/api/v1/runs/{run.id}/{suffix}"


# --- detail -------------------------------------------------------------------------------


def test_the_detail_has_status_timings_model_calls_and_tool_executions(api, turn):
    response = api.get(run_url(turn))

    assert response.status_code == 200
    body = response.json()
    assert body["id"] == str(turn.id)
    assert body["conversation_id"] == str(turn.conversation_id)
    assert body["trigger_message_id"] == str(turn.trigger_message_id)
    assert (body["status"], body["mode"], body["steps"], body["model_calls"]) == (
        "completed",
        "two_pass",
        1,
        2,
    )
    assert body["latency_ms"] == 1000
    assert all(body[key] for key in ("created_at", "started_at", "finished_at"))
    assert body["usage"] == {
        "prompt_tokens": 100,
        "completion_tokens": 17,
        "cached_tokens": None,
        "cost_usd": None,  # no price for its model: no cost, never 0
    }
    tools_call, compose_call = body["model_call_log"]
    assert (tools_call["purpose"], compose_call["purpose"]) == ("tools", "compose")
    assert tools_call["tools_offered"] == ["calculator", "get_current_time"]
    assert tools_call["latency_ms"] == 300
    (execution,) = body["tool_executions"]
    assert execution["name"] == "calculator"
    assert execution["status"] == "succeeded"
    assert execution["arguments"] == {"expression": "12*7"}
    assert execution["result"]["result"] == 84
    assert execution["conversation_id"] == str(turn.conversation_id)
    assert execution["run_id"] == str(turn.id)
    assert "worker" not in execution


def test_the_detail_costs_four_queries(api, turn, django_assert_num_queries):
    # The token, the run, its model calls, its tool executions.
    with django_assert_num_queries(4):
        assert api.get(run_url(turn)).status_code == 200


# --- events -------------------------------------------------------------------------------


@pytest.fixture
def events(turn):
    published = [
        event_publish(run=turn, event=event_make(kind))
        for kind in (["run.started", "message.created", "message.delta", "run.completed"])
    ]
    return [e.seq for e in published]


def test_events_are_envelopes_in_seq_order(api, turn, events):
    response = api.get(run_url(turn, "events/"))
    assert response.status_code == 200
    body = response.json()
    assert [e["seq"] for e in body["events"]] == events
    assert body["events"][0] == {
        "seq": events[0],
        "type": "run.started",
        "run_id": str(turn.id),
        "ts": body["events"][0]["ts"],
        "data": {"mode": "<mode>"},
    }
    assert body["events"][0]["ts"].endswith("Z")
    assert (body["last_seq"], body["has_more"], body["run_status"]) == (
        events[-1],
        False,
        "completed",
    )


def test_events_after_a_seq_and_with_a_limit(api, turn, events):
    body = api.get(run_url(turn, f"events/?after={events[0]}&limit=2")).json()
    assert [e["seq"] for e in body["events"]] == events[1:3]
    assert (body["last_seq"], body["has_more"]) == (events[2], True)
    rest = api.get(run_url(turn, f"events/?after={body['last_seq']}")).json()
    assert [e["seq"] for e in rest["events"]] == events[3:]
    nothing = api.get(run_url(turn, f"events/?after={events[-1]}")).json()
    assert (nothing["events"], nothing["last_seq"], nothing["has_more"]) == ([], events[-1], False)


def test_last_event_id_counts_as_after(api, turn, events):
    body = api.get(run_url(turn, "events/?after=0"), HTTP_LAST_EVENT_ID=str(events[1])).json()
    assert [e["seq"] for e in body["events"]] == events[2:]


def test_only_this_runs_events(api, turn, events, conversation):
    other_run = RunFactory(conversation=conversation, status=RunStatus.COMPLETED)
    event_publish(run=other_run, event=event_make("run.started"))
    body = api.get(run_url(turn, "events/")).json()
    assert [e["seq"] for e in body["events"]] == events


@pytest.mark.parametrize(
    ("query", "header", "field"),
    [
        ("after=-1", None, "after"),
        ("after=x", None, "after"),
        ("limit=0", None, "limit"),
        ("limit=1001", None, "limit"),
        ("after=99999999999999999999999", None, "after"),
        ("", "yesterday", "Last-Event-ID"),
        # isdigit() says yes to these, int() says no.
        ("", "\u00b2", "Last-Event-ID"),
        ("", "1\u00b9", "Last-Event-ID"),
        ("", "\u0663", "Last-Event-ID"),
        ("", "99999999999999999999999", "Last-Event-ID"),
    ],
)
def test_bad_event_parameters_are_a_400(api, turn, query, header, field):
    extra = {"HTTP_LAST_EVENT_ID": header} if header else {}
    response = api.get(run_url(turn, f"events/?{query}"), **extra)
    assert response.status_code == 400
    assert response.json()["field"] == field


# --- cancel -------------------------------------------------------------------------------


def test_cancel_stops_a_run_and_answers_its_calls(api, conversation):
    run = RunFactory(conversation=conversation, status=RunStatus.RUNNING)
    assistant = Message.objects.create(
        conversation=conversation,
        run=run,
        position=0,
        role=Role.ASSISTANT,
        content=None,
        tool_calls=[
            {
                "id": "call_x",
                "type": "function",
                "function": {"name": "calculator", "arguments": "{}"},
            }
        ],
    )
    ToolExecution.objects.create(
        run=run, message=assistant, tool_call_id="call_x", name="calculator"
    )

    response = api.post(run_url(run, "cancel/"))

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "cancelled"
    assert body["finished_at"] is not None
    assert body["tool_executions"][0]["status"] == "cancelled"
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert ToolExecution.objects.get().status == ExecutionStatus.CANCELLED
    assert Message.objects.filter(role=Role.TOOL, tool_call_id="call_x").exists()


def test_cancelling_an_ended_run_is_a_409(api, turn):
    response = api.post(run_url(turn, "cancel/"))
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "conflict"
    assert body["details"] == {"run_id": str(turn.id), "status": "completed"}
    assert Run.objects.get(pk=turn.id).status == RunStatus.COMPLETED


def test_cancel_takes_no_body_and_ignores_one(api, conversation):
    run = RunFactory(conversation=conversation, status=RunStatus.QUEUED)
    response = api.post(run_url(run, "cancel/"), {"reason": "x"}, format="json")
    assert response.status_code == 200


def test_cancel_is_post_only(api, turn):
    response = api.get(run_url(turn, "cancel/"))
    assert response.status_code == 405
    assert response["Allow"] == "POST, OPTIONS"


def test_a_run_says_its_steps_as_the_audit_counts_them(api, turn, admin_client):
    # The audit's Steps (the run page, the compare page, the admin) is the run's
    # `model_steps`; `steps` is what max_steps bounds, the steps that ran tools.
    body = api.get(run_url(turn)).json()
    assert (body["steps"], body["model_steps"]) == (1, 2)
    page = admin_client.get(f"/audit/runs/{turn.pk}/").content.decode()
    assert f'<dd data-testid="run-steps">{body["model_steps"]}</dd>' in page
