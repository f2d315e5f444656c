"""Lost runs are found and finished: a queued run whose task vanished, a run whose worker died."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from chat.engine.recovery import runs_recover
from chat.models import Message, Role, Run, RunStatus
from tests.chat.engine.conftest import wait_for_run
from tests.factories import ConversationFactory

pytestmark = pytest.mark.django_db(transaction=True)


def lost_run(user, **fields):
    conversation = ConversationFactory(owner=user)
    run = Run.objects.create(conversation=conversation, mode=conversation.mode, **fields)
    message = Message.objects.create(
        conversation=conversation, run=run, position=0, role=Role.USER, content="what is 12*7"
    )
    Run.objects.filter(pk=run.pk).update(
        trigger_message=message, created_at=timezone.now() - timedelta(minutes=5)
    )
    return run


def test_a_queued_run_that_was_never_dispatched_is_recovered(user):
    run = lost_run(user)
    assert runs_recover() == [run.pk]
    run = wait_for_run(run)
    assert run.status == RunStatus.COMPLETED, run.error
    assert "84" in Message.objects.filter(run=run).order_by("-position").first().content


def test_a_running_run_with_a_stale_heartbeat_is_taken_over(user):
    import uuid

    stale = timezone.now() - timedelta(minutes=5)
    run = lost_run(user, status=RunStatus.RUNNING, lease=uuid.uuid4(), heartbeat_at=stale)
    call_command("recover_runs")
    run = wait_for_run(run)
    assert run.status == RunStatus.COMPLETED, run.error


def test_live_and_finished_runs_are_left_alone(user):
    import uuid

    lost_run(user, status=RunStatus.RUNNING, lease=uuid.uuid4(), heartbeat_at=timezone.now())
    lost_run(user, status=RunStatus.COMPLETED)
    fresh = ConversationFactory(owner=user)
    Run.objects.create(conversation=fresh, mode=fresh.mode)  # queued a moment ago
    assert runs_recover() == []


def test_a_run_parked_on_a_tool_that_is_still_in_time_is_left_alone(user):
    from chat.models import ExecutionStatus, ToolExecution

    stale = timezone.now() - timedelta(minutes=5)
    run = lost_run(user, status=RunStatus.RUNNING, heartbeat_at=stale)
    call = [
        {
            "id": "call_wait",
            "type": "function",
            "function": {"name": "slow_step", "arguments": '{"label": "w", "seconds": 0.1}'},
        }
    ]
    assistant = Message.objects.create(
        conversation=run.conversation,
        run=run,
        position=1,
        role=Role.ASSISTANT,
        content=None,
        tool_calls=call,
    )
    execution = ToolExecution.objects.create(
        run=run,
        message=assistant,
        tool_call_id="call_wait",
        name="slow_step",
        status=ExecutionStatus.RUNNING,
        started_at=timezone.now(),
    )
    assert runs_recover() == []
    # Past its timeout (20 s) and the grace period, the call is presumed lost with its worker.
    ToolExecution.objects.filter(pk=execution.pk).update(
        started_at=timezone.now() - timedelta(minutes=5)
    )
    assert runs_recover() == [run.pk]
    # Taken over: the idempotent call runs again and the run finishes.
    run = wait_for_run(run, 20)
    assert run.status == RunStatus.COMPLETED, run.error
    execution.refresh_from_db()
    assert (execution.status, execution.attempts) == (ExecutionStatus.SUCCEEDED, 1)


def test_a_queued_run_waiting_for_a_worker_is_sent_again_once_not_at_every_sweep(
    user, celery_env, redis_url
):
    """Its task is in the queue already (behind others): sending it at every sweep (5 s)
    piled up copies, each of which, delivered once the run had started, began a chain of
    rechecks of its own. It is sent again once per TOOLCHAT_RESEND_S."""
    import redis

    broker = redis.Redis.from_url(redis_url)
    run = lost_run(user)  # queued five minutes ago; no worker is running
    sent = [runs_recover() for _ in range(4)]
    assert sent == [[run.pk], [], [], []]
    assert broker.llen("celery") == 1, "one copy of the task, not one per sweep"
    # The run was left alone meanwhile: still queued, as the database says.
    assert Run.objects.get(pk=run.pk).status == RunStatus.QUEUED


def test_a_copy_that_could_not_be_sent_is_sent_at_the_next_sweep(user, celery_env, redis_url):
    import redis

    from project.celery import app
    from tests.plugins.services import free_port
    from tests.stack import reset_producer_pool

    run = lost_run(user)
    app.conf.broker_url = f"redis://127.0.0.1:{free_port()}/0"  # the broker is down
    reset_producer_pool(app)
    try:
        assert runs_recover() == []
    finally:
        app.conf.broker_url = redis_url
        reset_producer_pool(app)
    assert runs_recover() == [run.pk]  # not held back by the copy that failed
    assert redis.Redis.from_url(redis_url).llen("celery") == 1
