"""The audit's comparison of two runs: a replay and its original, made by the engine.

The original is a two-pass turn against the scripted server; the replay is
made by `run_replay` on the same server, whose model answers differently.
The pages are read as HTML here, and in a real browser in
tests/chat/audit/test_compare_browser.py.
"""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.test import Client

from chat.audit.period import period_preset
from chat.audit.replays import MAX_REPORTED_REPLAYS, replay_rows
from chat.models import ExecutionStatus, ModelCall, ReplayMode, Run, RunStatus
from chat.replay_report import report_row, report_table
from chat.services.replays import run_replay
from tests.chat.audit.scripted import PACE, two_pass_run
from tests.factories import CallSpec, ConversationFactory, UserFactory, finished_run
from tests.llm_server import text_reply, tool_calls_reply
from tests.stack import wait_for_run


def replayed(llm_server, original):
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "7*12"}')], **PACE),
        text_reply("Seven twelves make 84.", **PACE),
    )
    replica = wait_for_run(run_replay(run=original, model="openai/test-model"))
    assert replica.status == RunStatus.COMPLETED, replica.error
    return replica


@pytest.mark.django_db(transaction=True)
def test_the_comparison_page_shows_both_runs_their_answers_calls_and_waterfalls(llm_server):
    owner = UserFactory(username="ada")
    original = two_pass_run(llm_server, owner)
    replica = replayed(llm_server, original)
    staff = Client()
    staff.force_login(UserFactory(username="auditor", is_staff=True))

    response = staff.get(f"/audit/runs/{original.pk}/compare/{replica.pk}/")

    assert response.status_code == 200
    html = response.content.decode()
    assert html.count('data-testid="compare-run"') == 2
    assert html.count('data-testid="waterfall"') == 2
    assert "<del>Twelve times seven is</del><ins>Seven twelves make</ins><span> 84.</span>" in html
    assert 'data-testid="diff-limited"' not in html
    assert "unmatched" in html  # the replay's calculator call, with other arguments
    assert "{&quot;expression&quot;: &quot;7*12&quot;}" in html
    # Both waterfalls on one axis: the longer run's ticks are the shorter one's too.
    first, second = (html.index(f"wf-title-{run.pk.hex[:8]}") for run in (original, replica))
    assert first < second
    # The original's page lists its replay, the replay's page its original, each to compare.
    compare = f"/audit/runs/{original.pk}/compare/{replica.pk}/"
    assert compare in staff.get(f"/audit/runs/{original.pk}/").content.decode()
    assert compare in staff.get(f"/audit/runs/{replica.pk}/").content.decode()
    # Staff only, and a missing run is a 404.
    user = Client()
    user.force_login(owner)
    assert user.get(compare).status_code == 403
    assert staff.get(f"/audit/runs/{original.pk}/compare/{owner.pk:032x}/").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_the_replays_page_reports_the_periods_replays_per_model(llm_server):
    owner = UserFactory(username="ada")
    original = two_pass_run(llm_server, owner)
    replica = replayed(llm_server, original)
    staff = Client()
    staff.force_login(UserFactory(username="auditor", is_staff=True))

    overview = staff.get("/audit/?period=hour").content.decode()
    assert "/audit/replays/?period=hour" in overview
    assert overview.count('data-testid="replay-mark"') == 1  # the runs list says which
    without = staff.get("/audit/?period=hour&replays=no").content.decode()
    only = staff.get("/audit/?period=hour&replays=only").content.decode()
    assert f'data-run="{original.pk}"' in without
    assert f'data-run="{replica.pk}"' not in without
    assert f'data-run="{replica.pk}"' in only
    assert f'data-run="{original.pk}"' not in only
    page = staff.get("/audit/replays/?period=hour")

    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-testid="replay-totals"' in html
    assert "openai/test-model" in html
    assert f"/audit/runs/{original.pk}/compare/{replica.pk}/" in html
    assert "<strong>no</strong>" in html  # other arguments: not the same tool calls
    csv_text = staff.get("/audit/replays.csv?period=hour").content.decode()
    assert csv_text.splitlines()[0].startswith("run_id,replay_id,model")
    assert str(replica.pk) in csv_text
    assert staff.get("/audit/replays/?period=nonsense").status_code == 400
    assert staff.get("/audit/replays.csv?period=nonsense").status_code == 400
    user = Client()
    user.force_login(owner)
    assert user.get("/audit/replays/").status_code == 403


@pytest.mark.django_db(transaction=True)
def test_staff_start_replays_of_a_periods_runs_and_watch_them_end(llm_server, settings):
    settings.LLM_ALLOWED_MODELS = ["other-model"]
    owner = UserFactory(username="ada")
    originals = [two_pass_run(llm_server, owner) for _ in range(2)]
    staff = Client()
    staff.force_login(UserFactory(username="auditor", is_staff=True))
    page = staff.get("/audit/replays/?period=hour").content.decode()
    assert 'data-testid="replay-start"' in page
    assert "openai/other-model" in page
    llm_server.responder = lambda body: text_reply("Another answer.")

    started = staff.post(
        "/audit/replays/start/?period=hour",
        {"models": ["openai/other-model"], "limit": "5", "tools": "recorded", "replay": "free"},
    )

    assert started.status_code == 302
    assert started["Location"] == "/audit/replays/?period=hour&started=2"
    replicas = list(Run.objects.filter(replay_of__in=originals))
    assert len(replicas) == 2
    for replica in replicas:
        assert wait_for_run(replica).status == RunStatus.COMPLETED
    report = staff.get(started["Location"]).content.decode()
    assert "2 replays started." in report
    assert "still running" not in report
    assert report.count("/compare/") == 2
    # Bad choices start nothing; non-staff cannot start.
    bad = staff.post(
        "/audit/replays/start/?period=hour",
        {"models": ["nowhere/nothing"], "limit": "5", "tools": "recorded", "replay": "free"},
    )
    assert bad.status_code == 400
    user = Client()
    user.force_login(owner)
    assert user.post("/audit/replays/start/?period=hour", {}).status_code == 403
    assert Run.objects.filter(replay_of__isnull=False).count() == 2


def stored_replays(count: int) -> list[Run]:
    """`count` replays stored as the engine stores them, each of a run of its own; every
    third is forced (its model's answers at the original's steps kept on its calls)."""
    owner = UserFactory(username="ada")
    replicas = []
    for index in range(count):
        original = finished_run(ConversationFactory(owner=owner), latency_ms=1000 + index)
        forced = index % 3 == 2
        replica = finished_run(
            ConversationFactory(owner=owner, model="openai/other-model", replay_of=original),
            calls=[CallSpec(arguments={"expression": "7*12"}, status=ExecutionStatus.UNMATCHED)],
            answer=f"Seven twelves make 84 ({index}).",
            latency_ms=2000 + index,
            replay_of=original,
            replay_mode=ReplayMode.FORCED if forced else ReplayMode.FREE,
        )
        if forced:
            ModelCall.objects.filter(run=replica, purpose="tools").update(
                forced_answer={"content": None, "tool_calls": [NOTE_CALL]}
            )
        replicas.append(replica)
    return replicas


NOTE_CALL = {
    "id": "call_forced",
    "type": "function",
    "function": {"name": "calculator", "arguments": '{"expression": "12*7"}'},
}


@pytest.mark.django_db
def test_the_replays_page_costs_a_few_queries_however_many_replays_it_reports(
    django_assert_max_num_queries,
):
    replicas = stored_replays(MAX_REPORTED_REPLAYS)
    staff = Client()
    staff.force_login(UserFactory(username="auditor", is_staff=True))
    staff.get("/audit/replays/?period=day")  # the session, once

    # The session and the user, the replays, their count, the records of both sides of
    # every pair (model calls, tool calls, answers), and the replays still running.
    with django_assert_max_num_queries(8):
        html = staff.get("/audit/replays/?period=hour").content.decode()

    assert html.count("/compare/") == MAX_REPORTED_REPLAYS
    # The figures are those of comparing each replay with its original on its own.
    rows = {row.replay_id: row for row in replay_rows(period_preset("hour"))[0]}
    for replica in replicas[:: MAX_REPORTED_REPLAYS // 10]:
        run = Run.objects.select_related("replay_of").get(pk=replica.pk)
        assert rows[str(run.pk)] == report_row(run.replay_of, run, model="openai/other-model")
    forced = rows[str(replicas[2].pk)]
    assert (forced.steps_same, forced.steps) == (1, 1)
    assert rows[str(replicas[0].pk)].same_tool_calls is False


@pytest.mark.django_db
def test_the_comparison_page_says_when_the_answers_were_too_long_to_diff_whole():
    from tests.chat.api.test_replays import long_answer

    owner = UserFactory(username="ada")
    original = finished_run(ConversationFactory(owner=owner), answer=long_answer(8000))
    replica = finished_run(
        ConversationFactory(owner=owner),
        answer=long_answer(8000, changed=range(0, 8000, 100)),
        replay_of=original,
    )
    staff = Client()
    staff.force_login(UserFactory(username="auditor", is_staff=True))

    html = staff.get(f"/audit/runs/{original.pk}/compare/{replica.pk}/").content.decode()

    assert 'data-testid="diff-limited"' in html


@pytest.fixture
def batch_models(settings):
    settings.LLM_PROVIDER = "openai"
    settings.OPENAI_API_KEY = "sk-test"
    settings.LLM_MODEL = "test-model"
    settings.LLM_ALLOWED_MODELS = ["other-model"]


@pytest.mark.django_db
def test_a_staff_batch_leaves_out_the_runs_that_cannot_be_replayed(batch_models):
    owner = UserFactory(username="ada")
    unanswerable = finished_run(ConversationFactory(owner=owner))  # the older one
    Run.objects.filter(pk=unanswerable.pk).update(trigger_message=None)
    replayable = finished_run(ConversationFactory(owner=owner))
    staff = Client()
    staff.force_login(UserFactory(username="auditor", is_staff=True))

    started = staff.post(
        "/audit/replays/start/?period=hour",
        {"models": ["openai/other-model"], "limit": "5", "tools": "recorded", "replay": "free"},
    )

    assert started.status_code == 302
    assert started["Location"] == "/audit/replays/?period=hour&started=1"
    assert list(
        Run.objects.filter(replay_of__isnull=False).values_list("replay_of", flat=True)
    ) == [replayable.pk]


@pytest.mark.django_db
def test_after_start_the_replays_page_keeps_the_period_it_was_started_from(batch_models):
    from datetime import timedelta

    from django.utils import timezone

    owner = UserFactory(username="ada")
    original = finished_run(ConversationFactory(owner=owner))
    staff = Client()
    staff.force_login(UserFactory(username="auditor", is_staff=True))
    form = {"models": ["openai/other-model"], "limit": "5", "tools": "recorded", "replay": "free"}

    started = staff.post("/audit/replays/start/?period=week", form)

    assert started.status_code == 302
    assert started["Location"] == "/audit/replays/?period=week&started=1"
    page = staff.get(started["Location"]).content.decode()
    assert "<strong>Last 7 days</strong>" in page
    # A custom period is kept too, and when it ended before now the page says where
    # the replays just begun are listed.
    now = timezone.localtime()
    start, end = now - timedelta(days=2), now - timedelta(minutes=5)
    original.created_at = now - timedelta(hours=1)
    type(original).objects.filter(pk=original.pk).update(created_at=original.created_at)
    custom = {
        "period": "custom",
        "start": f"{start:%Y-%m-%dT%H:%M}",
        "end": f"{end:%Y-%m-%dT%H:%M}",
    }
    again = staff.post(f"/audit/replays/start/?{urlencode(custom)}", form)

    assert again.status_code == 302
    assert again["Location"] == f"/audit/replays/?{urlencode({**custom, 'started': 1})}"
    page = staff.get(again["Location"]).content.decode()
    assert f"{start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M}" in page
    notice = page.split('data-testid="replays-started">')[1].split("</p>")[0]
    assert "1 replay started" in notice
    assert 'href="/audit/replays/?period=hour"' in notice


@pytest.mark.django_db
def test_a_staff_batch_replays_with_recorded_tools_only(batch_models):
    finished_run(ConversationFactory(owner=UserFactory(username="ada")))
    staff = Client()
    staff.force_login(UserFactory(username="auditor", is_staff=True))
    page = staff.get("/audit/replays/?period=hour").content.decode()
    assert 'name="tools" value="recorded"' in page
    assert 'value="live"' not in page

    for replay in ("free", "forced"):
        refused = staff.post(
            "/audit/replays/start/?period=hour",
            {"models": ["openai/other-model"], "limit": "5", "tools": "live", "replay": replay},
        )

        assert refused.status_code == 400
        assert "recorded tools only" in refused.content.decode()
    assert not Run.objects.filter(replay_of__isnull=False).exists()


@pytest.mark.django_db
def test_a_failed_replay_says_why_on_the_replays_page_and_in_its_csv():
    owner = UserFactory(username="ada")
    original = finished_run(ConversationFactory(owner=owner))
    replica = finished_run(
        ConversationFactory(owner=owner), replay_of=original, status=RunStatus.FAILED
    )
    why = "The model call failed (connection error) after 4 attempts: <refused>"
    Run.objects.filter(pk=replica.pk).update(error=why)
    staff = Client()
    staff.force_login(UserFactory(username="auditor", is_staff=True))

    html = staff.get("/audit/replays/?period=hour").content.decode()
    row = html.split(f"/compare/{replica.pk}/")[1].split("</tr>")[0]
    assert "failed" in row
    assert "after 4 attempts: &lt;refused&gt;" in row  # escaped
    csv_text = staff.get("/audit/replays.csv?period=hour").content.decode()
    assert csv_text.splitlines()[0].endswith(",error")
    assert why in csv_text
    # manage.py replay's table says it under the replay's line.
    replica.refresh_from_db()
    table = report_table([report_row(original, replica, model="m")], []).splitlines()
    assert table[2] == f"  {why}"
