"""A person's wait for a call's approval is its own figure wherever a run's time is summed.

Real turns (the engine, the scripted model server, in-process tasks): the run
page's waterfall, the statistics and /metrics each show the wait for a person
apart, and toolchat's own time leaves it out, whether the person decided or
the run was cancelled while it waited; a replay's latency ratio compares the
two runs' own times.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.template.defaultfilters import floatformat
from django.test import Client
from django.utils import timezone

from chat.audit.period import period_preset
from chat.audit.queries import audit_run_get
from chat.audit.stats import run_totals, slowest_runs
from chat.audit.waterfall import run_waterfall
from chat.models import Run, RunStatus, ToolExecution
from chat.services.runs import run_cancel, run_start
from tests.assertions import wait_until
from tests.chat.telemetry.test_metrics import metrics_on, scrape
from tests.factories import ConversationFactory, UserFactory
from tests.llm_server import tool_calls_reply
from tests.stack import wait_for_run

pytestmark = pytest.mark.django_db(transaction=True)

__all__ = ["metrics_on"]  # a fixture, used by name

WAIT = timedelta(milliseconds=600)  # how long the person reads the request before acting


@pytest.fixture
def staff_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory(username="auditor", is_staff=True))
    return client


def waiting_run(llm_server, user, ledger_dir, monkeypatch) -> Run:
    """A run whose one call of launch_rocket waits for a person, for WAIT at least."""
    monkeypatch.setenv("TOOLCHAT_TEST_LEDGER", str(ledger_dir / "ledger.txt"))
    llm_server.push(tool_calls_reply([("launch_rocket", '{"target": "the moon"}')]))
    run = run_start(conversation=ConversationFactory(owner=user), content="launch it")
    wait_until(
        lambda: Run.objects.get(pk=run.pk).status == RunStatus.AWAITING_APPROVAL,
        what="the run to wait for approval",
    )
    asked = ToolExecution.objects.get(run=run).created_at
    wait_until(lambda: timezone.now() - asked >= WAIT, what="the person to read the request")
    return run


def cancelled_sum(after, before, name: str) -> float:
    """What cancelled turns added to a metric's samples between two scrapes."""
    return sum(
        number - before.get(key, 0.0)
        for key, number in after.items()
        if key[0] == name and ("outcome", "cancelled") in key[1]
    )


def totals(html: str) -> str:
    return html.split('data-testid="waterfall-totals"')[1].split("</p>")[0]


def test_a_run_cancelled_while_it_waits_for_a_person_shows_the_wait_apart_everywhere(
    metrics_on, llm_server, user, tmp_path, monkeypatch, staff_client, admin_client
):
    run = waiting_run(llm_server, user, tmp_path, monkeypatch)
    before = scrape()
    run_cancel(run=run)
    run = wait_for_run(run)
    assert run.status == RunStatus.CANCELLED
    assert run.approval_wait_ms is not None
    assert run.approval_wait_ms >= WAIT // timedelta(milliseconds=1)

    # The run page: waiting for a person is a segment of its own, toolchat's time is the rest.
    waterfall = run_waterfall(audit_run_get(run_id=run.pk))
    assert waterfall.approval_ms == pytest.approx(run.approval_wait_ms, abs=2)
    assert waterfall.overhead_ms < run.latency_ms - run.approval_wait_ms
    parts = waterfall.queue_ms + waterfall.model_ms + waterfall.tool_ms + waterfall.approval_ms
    assert parts + waterfall.overhead_ms == pytest.approx(waterfall.total_ms)
    assert waterfall.segments[-1].kind == "approval"
    html = staff_client.get(f"/audit/runs/{run.pk}/").content.decode()
    shown = totals(html)
    assert f'<span data-testid="approval-ms">{waterfall.approval_ms:,.0f}</span>' in shown
    assert f'<span data-testid="overhead-ms">{waterfall.overhead_ms:,.0f}</span>' in shown
    # The call's row says how long it waited before its run was cancelled.
    assert f"cancelled after {run.approval_wait_ms:,} ms waiting for a person" in html

    execution = ToolExecution.objects.get(run=run)
    admin = admin_client.get(f"/admin/chat/toolexecution/{execution.pk}/change/").content.decode()
    assert f"{run.approval_wait_ms:,} ms, undecided: cancelled with its run" in admin

    # The statistics: the run's own time leaves the wait out, the wait is counted apart.
    period = period_preset("hour", now=timezone.now() + timedelta(seconds=1))
    (slow,) = [row for row in slowest_runs(period) if row.id == run.pk]
    assert slow.own_ms == run.latency_ms - run.approval_wait_ms
    assert slow.approval_wait_ms == run.approval_wait_ms
    counted = run_totals(period)
    assert counted.waited == 1
    assert counted.wait_p50_ms == pytest.approx(run.approval_wait_ms)
    assert counted.p50_ms == pytest.approx(run.latency_ms - run.approval_wait_ms)

    # /metrics: the wait has its own histogram; the turn's duration is toolchat's time.
    after = scrape()
    wait_sum = cancelled_sum(after, before, "toolchat_turn_approval_wait_seconds_sum")
    own_sum = cancelled_sum(after, before, "toolchat_turn_duration_seconds_sum")
    assert wait_sum == pytest.approx(run.approval_wait_ms / 1000)
    assert own_sum == pytest.approx((run.latency_ms - run.approval_wait_ms) / 1000)


def test_an_approved_calls_wait_is_its_own_segment_on_the_run_page(
    llm_server, user, tmp_path, monkeypatch, staff_client
):
    from chat.services.approvals import tool_call_decide

    run = waiting_run(llm_server, user, tmp_path, monkeypatch)
    execution = ToolExecution.objects.get(run=run)
    tool_call_decide(execution_id=execution.pk, user=user, approve=True)
    run = wait_for_run(run)
    execution.refresh_from_db()
    assert run.status == RunStatus.COMPLETED, run.error
    assert run.approval_wait_ms == execution.approval_wait_ms

    waterfall = run_waterfall(audit_run_get(run_id=run.pk))
    assert waterfall.approval_ms == pytest.approx(execution.approval_wait_ms, abs=2)
    assert waterfall.overhead_ms < run.latency_ms - run.approval_wait_ms
    html = staff_client.get(f"/audit/runs/{run.pk}/").content.decode()
    assert f'<span data-testid="approval-ms">{waterfall.approval_ms:,.0f}</span>' in totals(html)
    assert f"by {user.get_username()} after {execution.approval_wait_ms:,} ms" in html


def approved_after_a_wait(run: Run, user) -> Run:
    """The run's one call approved by `user` once it has waited WAIT; the ended run."""
    from chat.services.approvals import tool_call_decide

    wait_until(
        lambda: Run.objects.get(pk=run.pk).status == RunStatus.AWAITING_APPROVAL,
        what="the run to wait for approval",
    )
    execution = ToolExecution.objects.get(run=run)
    wait_until(
        lambda: timezone.now() - execution.created_at >= WAIT,
        what="the person to read the request",
    )
    tool_call_decide(execution_id=execution.pk, user=user, approve=True)
    run = wait_for_run(run)
    assert run.status == RunStatus.COMPLETED, run.error
    assert run.approval_wait_ms is not None
    return run


def test_a_replays_latency_ratio_leaves_out_both_runs_waits_for_a_person(
    llm_server, user, tmp_path, monkeypatch, staff_client
):
    from chat.replay_report import report_row
    from chat.services.replays import run_replay

    original = approved_after_a_wait(waiting_run(llm_server, user, tmp_path, monkeypatch), user)
    llm_server.push(tool_calls_reply([("launch_rocket", '{"target": "the moon"}')]))
    replica = run_replay(run=original, model="openai/test-model", tools="live")
    replica = approved_after_a_wait(replica, user)

    # The ratio compares toolchat's time in each run, as the statistics count it: the
    # latency less the wait for a person, which is people's time and differs run to run.
    own = (replica.latency_ms - replica.approval_wait_ms) / (
        original.latency_ms - original.approval_wait_ms
    )
    row = report_row(original, replica, model="openai/test-model")
    assert row.latency_ratio == pytest.approx(own, abs=0.001)
    period = period_preset("hour", now=timezone.now() + timedelta(seconds=1))
    (slow,) = [r for r in slowest_runs(period, replays=True) if r.id == replica.pk]
    assert slow.own_ms == replica.latency_ms - replica.approval_wait_ms
    html = staff_client.get("/audit/replays/?period=hour").content.decode()
    # Written as the page writes it (Django's floatformat rounds half up; Python's
    # format rounds the binary float, so 0.725 can read 0.72 in one and 0.73 in the other).
    shown = floatformat(row.latency_ratio, 2)
    assert f'<td class="num" data-label="Latency ratio">{shown}</td>' in html
