"""A run built directly (run_data) is what RunSerializer makes of it, to the byte.

Both from the rows `run_shown` reads with constant statements (every answer
to a POST reads them) and from `run_detail`'s ORM prefetches.
"""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone
from rest_framework.renderers import JSONRenderer

from chat.api.run_data import run_data
from chat.api.serializers import RunSerializer
from chat.exceptions import RunNotFound
from chat.models import ExecutionStatus, Run, RunStatus
from chat.selectors import run_detail, run_shown
from tests.chat.api.conftest import stored_turn
from tests.factories import ModelCallFactory, RunFactory, ToolExecutionFactory

pytestmark = pytest.mark.django_db


def rendered(data) -> bytes:
    return JSONRenderer().render(data)


def same_every_way(run, user) -> dict:
    fresh = run_detail(run_id=run.pk, user=user)
    shown = run_shown(run_id=run.pk, user=user)
    data = run_data(shown.run, shown.calls, shown.executions)
    assert rendered(data) == rendered(RunSerializer(fresh).data)
    assert rendered(run_data(fresh)) == rendered(data)
    return data


def test_a_finished_turn_is_the_same_both_ways(conversation, user):
    run = stored_turn(conversation)
    same_every_way(run, user)


def test_a_run_with_every_optional_field_set_or_empty_is_the_same_both_ways(conversation, user):
    run = RunFactory(
        conversation=conversation,
        status=RunStatus.FAILED,
        error="The model call failed (deadline)",
        client_options={"temperature": 0.2, "stream": True},
        client_tools=[{"type": "function", "function": {"name": "lookup"}}],
        started_at=timezone.now(),
        finished_at=timezone.now() + datetime.timedelta(microseconds=1500),
        latency_ms=2,
    )
    ModelCallFactory(run=run, prompt_tokens=None, completion_tokens=None, tools_offered=[])
    ModelCallFactory(run=run, step=2, purpose="compose", status="failed", error="boom")
    message = run.conversation.messages.create(
        run=run, position=1, role="assistant", content=None, tool_calls=[]
    )
    ToolExecutionFactory(
        run=run,
        message=message,
        status=ExecutionStatus.REJECTED,
        arguments=None,
        arguments_raw="{not json",
        approved_by=user,
        decided_at=timezone.now(),
        decision_reason="no",
        result="a plain string",
        truncated=True,
        error="rejected",
    )
    ToolExecutionFactory(
        run=run, message=message, started_at=None, finished_at=None, duration_ms=None
    )
    same_every_way(run, user)


def test_a_queued_run_is_the_same_both_ways(conversation, user):
    run = RunFactory(conversation=conversation)
    same_every_way(run, user)


def test_a_forced_replay_with_a_replayed_call_is_the_same_both_ways(conversation, user):
    """The replay's fields: the run it replays, how, what the model answered at a forced
    step, and the recorded call a replayed one was served."""
    original = stored_turn(conversation)
    recorded = ToolExecutionFactory(run=original, message=original.conversation.messages.first())
    run = RunFactory(conversation=conversation, replay_of=original, replay_tools="recorded")
    Run.objects.filter(pk=run.pk).update(replay_mode="forced")
    ModelCallFactory(run=run, forced_answer={"content": "84", "tool_calls": []})
    message = run.conversation.messages.create(
        run=run, position=9, role="assistant", content=None, tool_calls=[]
    )
    ToolExecutionFactory(
        run=run, message=message, status=ExecutionStatus.REPLAYED, replayed_from=recorded
    )
    data = same_every_way(run, user)
    assert data["replay_of"] == str(original.pk)
    assert (data["replay_tools"], data["replay_mode"]) == ("recorded", "forced")
    assert data["model_call_log"][0]["forced_answer"] == {"content": "84", "tool_calls": []}
    assert data["tool_executions"][0]["replayed_from"] == str(recorded.pk)


@pytest.mark.parametrize("run_id", ["not-a-uuid", "00000000-0000-0000-0000-000000000000"])
def test_a_malformed_or_unknown_run_id_is_not_found(user, run_id):
    with pytest.raises(RunNotFound):
        run_shown(run_id=run_id, user=user)


def test_another_users_run_is_not_found(conversation, other_user):
    run = stored_turn(conversation)
    with pytest.raises(RunNotFound):
        run_shown(run_id=run.pk, user=other_user)
