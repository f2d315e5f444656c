"""The turn engine on real Celery workers with a Redis broker, including workers that die.

These run in the PostgreSQL pass: the workers are other processes and need a
database server they can reach.
"""

from __future__ import annotations

import json
import re
import socket

import pytest
import yaml

from chat.models import (
    ExecutionStatus,
    Message,
    ModelCall,
    Role,
    RunEvent,
    RunStatus,
    ToolExecution,
)
from chat.selectors import history_for_model
from chat.services.runs import run_start
from tests.assertions import assert_valid_history, wait_until
from tests.chat.engine.conftest import wait_for_run
from tests.factories import ConversationFactory
from tests.llm_server import text_reply, tool_calls_reply
from tests.stack import ROOT

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def ledger_lines(celery_env):
    return celery_env["ledger"].read_text().split()


def test_parallel_tool_calls_run_concurrently_and_the_run_continues_once(
    llm_server, start_worker, celery_env, user
):
    start_worker("w1")
    start_worker("w2")
    conversation = ConversationFactory(owner=user)
    llm_server.push(
        tool_calls_reply(
            [
                ("slow_step", json.dumps({"label": "a", "seconds": 1.0})),
                ("slow_step", json.dumps({"label": "b", "seconds": 1.0})),
                ("slow_step", json.dumps({"label": "c", "seconds": 1.0})),
            ]
        ),
        text_reply("All three are done."),
    )
    run = wait_for_run(run_start(conversation=conversation, content="do three slow things"), 30)

    assert run.status == RunStatus.COMPLETED, run.error
    executions = list(ToolExecution.objects.filter(run=run))
    assert {e.status for e in executions} == {ExecutionStatus.SUCCEEDED}
    # Concurrent: every call started before any of them finished.
    assert max(e.started_at for e in executions) < min(e.finished_at for e in executions)
    assert sorted(ledger_lines(celery_env)) == sorted(
        ["start", "a", "end", "a", "start", "b", "end", "b", "start", "c", "end", "c"]
    )
    # The run moved on exactly once: one compose request, one final answer.
    assert len(llm_server.requests) == 2
    assert (
        Message.objects.filter(run=run, role=Role.ASSISTANT, tool_calls__isnull=True).count() == 1
    )
    assert_valid_history(history_for_model(conversation=conversation))


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_a_worker_killed_during_tools_resumes_without_repeating_finished_work(
    llm_server, start_worker, celery_env, user, pool
):
    worker = start_worker("w1", pool=pool)
    conversation = ConversationFactory(owner=user)
    llm_server.push(
        tool_calls_reply(
            [
                ("slow_step", json.dumps({"label": "quick", "seconds": 0.1})),
                ("slow_side_effect", json.dumps({"label": "payment", "seconds": 5})),
                ("slow_step", json.dumps({"label": "retryable", "seconds": 5})),
            ]
        ),
        text_reply("Here is where things stand."),
    )
    run = run_start(conversation=conversation, content="pay and report")
    wait_until(
        lambda: (
            ToolExecution.objects.filter(run=run, status=ExecutionStatus.RUNNING).count() == 2
            and ToolExecution.objects.filter(run=run, status=ExecutionStatus.SUCCEEDED).count() == 1
            # Marked running is not yet running: the kill must find both tools under way.
            and {"start payment", "start retryable"}
            <= set(celery_env["ledger"].read_text().splitlines())
        ),
        timeout=30,
        what="the quick call to finish while the slow ones run",
    )
    main_pid = worker.process.pid
    worker.kill()
    second = start_worker("w2", pool=pool)
    try:
        run = wait_for_run(run, 40)
    except AssertionError:
        print(second.log()[-6000:])
        raise

    assert run.status == RunStatus.COMPLETED, run.error
    by_label = {e.arguments["label"]: e for e in ToolExecution.objects.filter(run=run)}
    lines = " ".join(ledger_lines(celery_env))
    # Finished before the crash: never run again.
    assert lines.count("start quick") == 1
    assert (by_label["quick"].status, by_label["quick"].attempts) == (ExecutionStatus.SUCCEEDED, 1)
    # The audit names the process that ran the call: under prefork a child, not the parent.
    host, pid = by_label["quick"].worker.rsplit(":", 1)
    assert host == socket.gethostname()
    assert (int(pid) == main_pid) == (pool == "threads")
    # In flight and not idempotent: reported interrupted, not repeated.
    assert lines.count("start payment") == 1
    assert "end payment" not in lines
    assert by_label["payment"].status == ExecutionStatus.INTERRUPTED
    # In flight and idempotent: run again, to success.
    assert lines.count("start retryable") == 2
    assert lines.count("end retryable") == 1
    assert (by_label["retryable"].status, by_label["retryable"].attempts) == (
        ExecutionStatus.SUCCEEDED,
        2,
    )
    compose = llm_server.requests[-1]["messages"]
    payment_answer = next(
        json.loads(m["content"])
        for m in compose
        if m["role"] == "tool" and m["tool_call_id"] == by_label["payment"].tool_call_id
    )
    assert payment_answer["success"] is False
    assert "interrupted" in payment_answer["error"]
    assert_valid_history(history_for_model(conversation=conversation))


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_a_worker_killed_during_a_model_call_is_taken_over(
    llm_server, start_worker, celery_env, user, pool
):
    worker = start_worker("w1", pool=pool)
    conversation = ConversationFactory(owner=user)
    llm_server.push(
        text_reply("this answer streams very slowly " * 3, chunk_delay_s=0.4),
        text_reply("The answer after the crash."),
    )
    run = run_start(conversation=conversation, content="hello")
    wait_until(
        lambda: RunEvent.objects.filter(run=run, type="message.delta").exists(),
        what="the first answer to be streaming",
    )
    worker.kill()
    start_worker("w2", pool=pool)
    run = wait_for_run(run, 60)

    assert run.status == RunStatus.COMPLETED, run.error
    assistant = list(Message.objects.filter(run=run, role=Role.ASSISTANT))
    assert [m.content for m in assistant] == ["The answer after the crash."]
    calls = list(ModelCall.objects.filter(run=run).order_by("started_at"))
    assert [c.status for c in calls] == ["failed", "succeeded"]
    assert "stopped" in calls[0].error


def test_the_default_worker_keeps_other_users_turns_moving_while_models_are_slow(
    llm_server, start_worker, celery_env, user
):
    worker = start_worker("w1", pool=None, options=compose_worker_options())
    slow = [ConversationFactory(owner=user) for _ in range(3)]
    llm_server.push(*[text_reply("slow answer", delay_s=8) for _ in slow])
    slow_runs = [run_start(conversation=c, content="think hard") for c in slow]
    wait_until(lambda: len(llm_server.requests) == len(slow), what="the slow model calls")

    llm_server.push(text_reply("quick answer"))
    quick = wait_for_run(run_start(conversation=ConversationFactory(owner=user), content="hi"), 20)

    assert quick.status == RunStatus.COMPLETED, quick.error
    # Not behind the slow calls: it ended while all three were still waiting on the
    # model (8 s). The pool runs I/O-bound tasks side by side.
    assert all(r.status == RunStatus.RUNNING for r in map(refresh, slow_runs)), worker.log()[-3000:]


def refresh(run):
    run.refresh_from_db()
    return run


def compose_worker_options() -> tuple[str, ...]:
    """The pool options of the worker that docker-compose runs, defaults filled in."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    command = compose["services"]["worker"]["command"]
    options = command[command.index("worker") + 1 :]
    pool = [o for o in options if o.startswith(("--pool", "--concurrency"))]
    assert pool, f"docker-compose's worker names no pool: {command}"
    return tuple(re.sub(r"\$\{\w+:-(\w+)\}", r"\1", option) for option in pool)


def test_a_run_waiting_for_approval_survives_every_process_dying(
    llm_server, start_worker, celery_env, user
):
    import http.client

    from rest_framework.authtoken.models import Token

    from tests.plugins.servers import AsgiServer

    def serve(name: str) -> AsgiServer:
        server = AsgiServer(env=celery_env["env"], log_path=celery_env["logs"] / f"{name}.log")
        server.start()
        return server

    worker, server = start_worker("w1"), serve("web1")
    token = Token.objects.create(user=user)
    conversation = ConversationFactory(owner=user)
    llm_server.push(
        tool_calls_reply([("launch_rocket", '{"target": "europa"}')]),
        text_reply("Launched after all."),
    )
    run = run_start(conversation=conversation, content="launch it")
    wait_until(
        lambda: type(run).objects.get(pk=run.pk).status == RunStatus.AWAITING_APPROVAL,
        what="the run to wait for approval",
    )
    # Every process dies without a goodbye: the worker and the web server.
    worker.kill()
    server.process.kill()
    server.process.wait()
    worker, server = start_worker("w2"), serve("web2")
    try:
        execution = ToolExecution.objects.get(run=run)
        client = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        client.request(
            "POST",
            f"/api/v1/tool-executions/{execution.pk}/approve/",
            body=json.dumps({"reason": "after the crash"}),
            headers={"Authorization": f"Token {token.key}", "Content-Type": "application/json"},
        )
        response = client.getresponse()
        assert response.status == 200, response.read()
        run = wait_for_run(run, 60)
        assert run.status == RunStatus.COMPLETED, run.error
        assert celery_env["ledger"].read_text().splitlines() == ["launched europa"]  # once
        assert_valid_history(history_for_model(conversation=conversation))
    finally:
        server.stop()


def test_a_post_while_the_broker_is_down_is_accepted_and_runs_once_it_is_back(
    llm_server, celery_env, start_worker, user, settings
):
    """202, as documented: the message and its queued run are stored, the sweep sends the task."""
    import time

    from rest_framework.test import APIClient

    from chat.engine.recovery import runs_recover
    from chat.models import Run
    from project.celery import app
    from tests.plugins.services import free_port
    from tests.stack import reset_producer_pool

    conversation = ConversationFactory(owner=user)
    client = APIClient()
    client.force_authenticate(user)
    url = f"/api/v1/conversations/{conversation.id}/messages/"
    live_broker = app.conf.broker_url
    down = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    app.conf.broker_url = down
    reset_producer_pool(app)
    # The rate limit's cache is the same Redis in production: it lets the post through.
    settings.CACHES = {"default": {"BACKEND": "project.cache.RedisCache", "LOCATION": down}}
    try:
        started = time.monotonic()
        response = client.post(url, {"content": "are you there"}, format="json")
        took = time.monotonic() - started
    finally:
        app.conf.broker_url = live_broker
        reset_producer_pool(app)
        settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    assert response.status_code == 202, response.content
    assert took < 10, f"the post waited {took:.1f} s for the broker"
    run = Run.objects.get(pk=response.json()["run"]["id"])
    assert run.status == RunStatus.QUEUED
    retry = client.post(url, {"content": "are you there"}, format="json")
    assert retry.status_code == 409  # the first is not lost: its run is the active one
    assert retry.json()["details"]["run_id"] == str(run.pk)

    llm_server.push(text_reply("Back again."))
    start_worker("w1")
    settings.TOOLCHAT_RUN_STALE_S = 0.5
    wait_until(lambda: run.pk in runs_recover(), what="the sweep to queue the run again")
    run = wait_for_run(run, 30)
    assert run.status == RunStatus.COMPLETED, run.error
    assert Message.objects.filter(conversation=conversation).count() == 2


@pytest.mark.parametrize("calls", [1, 2], ids=["inline-call", "call-tasks"])
def test_a_dead_workers_tool_calls_are_found_by_their_silence_not_their_timeout(
    llm_server, start_worker, celery_env, user, settings, calls
):
    """The calls' heartbeats stop with their worker: recovery takes seconds, not timeout + grace."""
    import time

    from chat.engine.recovery import runs_recover

    # Timeout + grace is 20 + 60 s and nothing is redelivered: only the silence can tell.
    celery_env["env"].update(TOOLCHAT_TOOL_GRACE_S="60", CELERY_VISIBILITY_TIMEOUT="3600")
    settings.TOOLCHAT_TOOL_GRACE_S = 60
    settings.TOOLCHAT_RUN_STALE_S = 2
    worker = start_worker("w1")
    conversation = ConversationFactory(owner=user)
    llm_server.push(
        tool_calls_reply(
            [
                ("slow_side_effect", json.dumps({"label": f"pay{n}", "seconds": 30}))
                for n in range(calls)
            ]
        ),
        text_reply("Here is where things stand."),
    )
    run = run_start(conversation=conversation, content="pay")
    wait_until(
        lambda: (
            ToolExecution.objects.filter(run=run, status=ExecutionStatus.RUNNING).count() == calls
        ),
        what="the calls to start",
    )
    worker.kill()
    killed = time.monotonic()
    start_worker("w2")

    def moved_on():
        runs_recover()  # what beat does every TOOLCHAT_RECOVER_S
        run.refresh_from_db()
        return run.status == RunStatus.COMPLETED

    wait_until(moved_on, timeout=30, what="the run to be recovered and completed")
    took = time.monotonic() - killed
    assert took < 15, f"recovered {took:.1f} s after the kill"
    assert {e.status for e in ToolExecution.objects.filter(run=run)} == {
        ExecutionStatus.INTERRUPTED
    }
    assert "end pay" not in " ".join(ledger_lines(celery_env))


def test_a_call_whose_worker_died_while_its_run_awaits_approval_is_not_left_running(
    llm_server, start_worker, celery_env, user, settings
):
    """The sweep answers the dead call (interrupted: it is not idempotent); the approval still waits."""
    from chat.engine.recovery import runs_recover
    from chat.models import Run

    settings.TOOLCHAT_RUN_STALE_S = 2  # as the workers' (celery_env)
    settings.TOOLCHAT_TOOL_GRACE_S = 1
    # As in production: the killed worker's task comes back only after an hour.
    celery_env["env"]["CELERY_VISIBILITY_TIMEOUT"] = "3600"
    worker = start_worker("w1")
    conversation = ConversationFactory(owner=user)
    llm_server.push(
        tool_calls_reply(
            [
                ("slow_side_effect", json.dumps({"label": "payment", "seconds": 8})),
                ("launch_rocket", json.dumps({"target": "moon"})),
            ]
        ),
        text_reply("The payment was interrupted; the launch waits for you."),
    )
    run = run_start(conversation=conversation, content="pay, then launch")
    wait_until(
        lambda: (
            "start payment" in celery_env["ledger"].read_text().splitlines()
            and Run.objects.get(pk=run.pk).status == RunStatus.AWAITING_APPROVAL
        ),
        timeout=30,
        what="the payment to run while the launch waits for approval",
    )
    worker.kill()
    start_worker("w2")

    def swept() -> bool:
        runs_recover()  # what beat does every TOOLCHAT_RECOVER_S
        return (
            ToolExecution.objects.get(run=run, name="slow_side_effect").status
            == ExecutionStatus.INTERRUPTED
        )

    wait_until(swept, timeout=30, what="the dead call to be answered")
    assert Run.objects.get(pk=run.pk).status == RunStatus.AWAITING_APPROVAL
    rocket = ToolExecution.objects.get(run=run, name="launch_rocket")
    assert rocket.status == ExecutionStatus.AWAITING_APPROVAL
    assert "end payment" not in celery_env["ledger"].read_text()
