"""The audit overview (`/audit/`): statistics for a period, its plots, its CSV, its runs.

The figures themselves are tested in test_stats.py; here, what a staff user
sees and downloads, what a bad period gets, and what the page costs.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta
from html import unescape

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from chat.audit import stats as stats_module
from chat.audit.buckets import LATENCY_EDGES_MS
from chat.models import Message, Role, RunStatus
from tests.chat.audit.test_queries import HOSTILE, audited_run
from tests.chat.audit.test_stats import STATS_QUERIES, a_run, asking_message, many_runs
from tests.factories import (
    ConversationFactory,
    ModelCallFactory,
    RunFactory,
    ToolExecutionFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory(username="auditor", is_staff=True))
    return client


def test_the_slowest_runs_link_to_their_waterfalls(staff_client: Client):
    conversation = ConversationFactory(owner=UserFactory(username="ada"))
    runs = [audited_run(conversation, latency_ms=latency) for latency in (300, 9000, 1200)]

    html = staff_client.get("/audit/").content.decode()

    section = html.split('data-testid="slowest"')[1].split("</ol>")[0]
    assert section.index(f"/audit/runs/{runs[1].pk}/#waterfall") < section.index(
        f"/audit/runs/{runs[2].pk}/#waterfall"
    )
    assert "9,000 ms" in section
    assert "Find my notes, divide 1 by 0, and note it down." in section


def test_the_statistics_page_shows_tools_models_and_plots(staff_client: Client):
    audited_run(ConversationFactory(owner=UserFactory(username="ada"), title="Groceries"))

    response = staff_client.get("/audit/?period=hour")

    assert response.status_code == 200
    html = response.content.decode()
    assert 'aria-current="true">Last hour</a>' in html
    tools = html.split('data-testid="tool-table"')[1].split("</table>")[0]
    for name in ("search_notes", "calculator", "record_note"):
        assert f'<th scope="row" class="name">{name}</th>' in tools
    models = html.split('data-testid="model-table"')[1].split("</table>")[0]
    assert "test-model" in models
    assert 'data-testid="latency-histogram"' in html
    assert 'data-testid="runs-over-time"' in html
    assert html.count('class="plot-bar"') == len(LATENCY_EDGES_MS) + 1 + 60


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("period=custom&start=yesterday&end=2026-01-02T10:00", "From: Enter a valid date/time."),
        ("period=custom&start=2026-01-02T10:00&end=2026-01-01T10:00", "must come after its start"),
        ("period=custom&start=2026-01-02T10:00", "needs both a start and an end"),
        ("period=custom&start=2024-01-01T00:00&end=2026-01-01T00:00", "at most 366 days"),
        (
            "period=custom&start=9999-12-31T00:00&end=9999-12-31T23:59",
            "between 1970 and the year 9998",
        ),
        ("period=fortnight", "Period: Select a valid choice."),
        ("start=2026-13-45T99:99&end=x", "Enter a valid date/time."),
    ],
)
def test_bad_periods_get_a_clear_message_and_a_400(staff_client: Client, query, message):
    response = staff_client.get(f"/audit/?{query}")
    assert response.status_code == 400
    errors = response.content.decode().split('data-testid="period-errors"')[1].split("</div>")[0]
    assert message in unescape(errors)
    for url in ("/audit/tools.csv", "/audit/models.csv", "/audit/people.csv"):
        answer = staff_client.get(f"{url}?{query}")
        assert answer.status_code == 400
        assert message in answer.content.decode()


def test_a_custom_period_selects_its_runs(staff_client: Client):
    inside = a_run(created_ago=timedelta(days=3), latency_ms=700)
    outside = a_run(created_ago=timedelta(days=10), latency_ms=800)
    start = timezone.localtime(timezone.now() - timedelta(days=4)).strftime("%Y-%m-%dT%H:%M")
    end = timezone.localtime(timezone.now() - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")

    response = staff_client.get(f"/audit/?period=custom&start={start}&end={end}")

    assert response.status_code == 200
    html = response.content.decode()
    assert '<dd data-testid="run-count">1</dd>' in html
    assert f'data-run="{inside.pk}"' in html
    assert f'data-run="{outside.pk}"' not in html
    assert f'value="{start}"' in html  # the form keeps what was asked
    # The CSV links carry the same period.
    assert f"/audit/tools.csv?period=custom&amp;start={start.replace(':', '%3A')}" in html


def table_cells(html: str, testid: str) -> list[list[str]]:
    table = html.split(f'data-testid="{testid}"')[1].split("</table>")[0]
    body = table.split("<tbody>")[1]
    return [
        [unescape(cell) for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)
    ]


@pytest.mark.parametrize(
    ("testid", "url"),
    [
        ("tool-table", "tools.csv"),
        ("tool-decision-table", "tool-decisions.csv"),
        ("model-table", "models.csv"),
        ("people-table", "people.csv"),
    ],
)
def test_the_csv_parses_and_matches_the_table(staff_client: Client, testid, url):
    for latency in (100, 200, 4000):
        audited_run(latency_ms=latency)
    html = staff_client.get("/audit/?period=hour").content.decode()

    response = staff_client.get(f"/audit/{url}?period=hour")

    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="toolchat-')
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    header, body = rows[0], rows[1:]
    assert header[0] in {"tool", "model", "user"}
    if testid == "tool-decision-table":
        assert header[1:] == ["allowed", "asked", "approved", "rejected", "expired", "denied"]
    elif testid == "people-table":
        assert header[1:4] == ["runs", "model_calls", "prompt_tokens"]
    else:
        assert "p50_ms" in header
        assert "p95_ms" in header
    # The page writes thousands separated ("1,800"), the CSV bare ("1800").
    shown = [
        [("" if cell == "—" else cell.replace(",", "")) for cell in row]
        for row in table_cells(html, testid)
    ]
    assert body == shown
    assert body  # not two empty tables agreeing


def test_a_csv_cell_that_a_spreadsheet_would_run_is_defused(staff_client: Client):
    run = a_run()
    message = asking_message(run)
    ToolExecutionFactory(run=run, message=message, name='=HYPERLINK("http://x","y")')
    rows = list(
        csv.reader(io.StringIO(staff_client.get("/audit/tools.csv?period=hour").content.decode()))
    )
    assert rows[1][0] == '\'=HYPERLINK("http://x","y")'


def test_html_from_models_and_users_is_escaped_on_the_statistics_page(staff_client: Client):
    run = a_run(latency_ms=500)
    run.trigger_message = Message.objects.create(
        conversation=run.conversation, run=run, position=0, role=Role.USER, content=HOSTILE
    )
    run.save(update_fields=["trigger_message"])
    message = asking_message(run)
    ToolExecutionFactory(run=run, message=message, name="<script>x</script>")
    ModelCallFactory(run=run, model="<img src=x onerror=alert(1)>")

    html = staff_client.get("/audit/?period=hour").content.decode()

    assert "<script>" not in html
    assert "<img src=x" not in html
    assert "&lt;script&gt;x&lt;/script&gt;" in html  # the tool table
    assert "&lt;img src=x onerror=alert(1)&gt;" in html  # the model table
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in html  # the runs, the slowest


def test_more_tools_than_a_table_shows_are_said_so(staff_client: Client, monkeypatch):
    monkeypatch.setattr(stats_module, "MAX_GROUPS", 3)
    run = a_run()
    message = asking_message(run)
    for index in range(5):
        ToolExecutionFactory(run=run, message=message, name=f"tool_{index}")
    html = staff_client.get("/audit/?period=hour").content.decode()
    assert "Only the 3 most called are shown." in html


def test_the_page_costs_a_fixed_number_of_queries_whatever_the_data(staff_client: Client):
    many_runs(2)
    staff_client.get("/audit/?period=hour")  # warm the session
    with CaptureQueriesContext(connection) as few:
        assert staff_client.get("/audit/?period=hour").status_code == 200
    many_runs(40)
    with CaptureQueriesContext(connection) as many:
        assert staff_client.get("/audit/?period=hour").status_code == 200
    # The statistics, the people's table, the runs' count and page, the session and the user.
    assert len(many) == len(few) == STATS_QUERIES + 5, [q["sql"] for q in many.captured_queries]
    # The CSV: its table (and its percentiles on SQLite), the session and the user.
    csv_queries = 1 if connection.vendor == "postgresql" else 2
    with CaptureQueriesContext(connection) as download:
        staff_client.get("/audit/tools.csv?period=hour")
    assert len(download) == csv_queries + 2


def test_the_runs_of_a_period_are_paged_keeping_the_period_and_the_status(staff_client: Client):
    for _ in range(55):
        RunFactory(status=RunStatus.FAILED)
    RunFactory(status=RunStatus.COMPLETED)

    html = staff_client.get("/audit/?period=hour&status=failed").content.decode()

    runs = html.split('data-testid="runs"')[1]
    assert runs.count("data-run=") == 50
    assert '<a href="?period=hour&amp;status=failed&amp;page=2">Older →</a>' in runs
    assert '<input type="hidden" name="period" value="hour">' in html  # the filter keeps it
    second = staff_client.get("/audit/?period=hour&status=failed&page=2").content.decode()
    assert second.split('data-testid="runs"')[1].count("data-run=") == 5
    assert '<dd data-testid="run-count">56</dd>' in second  # the statistics cover every status


def test_a_run_replaced_by_a_regenerate_or_an_edit_says_so_in_the_run_lists(
    staff_client: Client,
):
    from tests.factories import MessageFactory

    conversation = ConversationFactory()
    now = timezone.now()
    first = MessageFactory(conversation=conversation, content="first question")
    done = {"conversation": conversation, "status": RunStatus.COMPLETED}
    regenerated = RunFactory(**done, trigger_message=first)
    again = RunFactory(**done, trigger_message=first)  # Regenerate
    edited_question = MessageFactory(
        conversation=conversation, content="second question", superseded_at=now
    )
    edited = RunFactory(**done, trigger_message=edited_question)
    resent = RunFactory(
        **done,
        trigger_message=MessageFactory(conversation=conversation, content="second, edited"),
    )
    Run = type(again)
    for index, run in enumerate((regenerated, again, edited, resent)):
        Run.objects.filter(pk=run.pk).update(created_at=now - timedelta(seconds=10 - index))

    for url in (f"/audit/conversations/{conversation.pk}/", "/audit/"):
        page = staff_client.get(url).content.decode()
        rows = dict(re.findall(r'data-run="([0-9a-f-]+)"(.*?)</tr>', page, re.S))
        assert "replaced by a regenerate" in rows[str(regenerated.pk)], url
        assert "replaced by an edit" in rows[str(edited.pk)], url
        assert "replaced" not in rows[str(again.pk)], url
        assert "replaced" not in rows[str(resent.pk)], url


def test_a_regenerated_run_whose_question_a_later_edit_replaced_says_regenerate(
    staff_client: Client,
):
    from tests.factories import MessageFactory

    conversation = ConversationFactory()
    now = timezone.now()
    # Asked, regenerated, then the question edited and resent: the first run was
    # replaced by the regenerate, the second by the edit.
    question = MessageFactory(conversation=conversation, content="question", superseded_at=now)
    done = {"conversation": conversation, "status": RunStatus.COMPLETED}
    regenerated = RunFactory(**done, trigger_message=question)
    again = RunFactory(**done, trigger_message=question)
    resent = RunFactory(
        **done, trigger_message=MessageFactory(conversation=conversation, content="edited")
    )
    Run = type(again)
    for index, run in enumerate((regenerated, again, resent)):
        Run.objects.filter(pk=run.pk).update(created_at=now - timedelta(seconds=10 - index))

    for url in (f"/audit/conversations/{conversation.pk}/", "/audit/"):
        page = staff_client.get(url).content.decode()
        rows = dict(re.findall(r'data-run="([0-9a-f-]+)"(.*?)</tr>', page, re.S))
        assert "replaced by a regenerate" in rows[str(regenerated.pk)], url
        assert "replaced by an edit" not in rows[str(regenerated.pk)], url
        assert "replaced by an edit" in rows[str(again.pk)], url
        assert "replaced" not in rows[str(resent.pk)], url


@pytest.mark.django_db(transaction=True)
def test_replays_are_left_out_of_the_statistics_unless_asked(llm_server):
    from tests.chat.audit.scripted import two_pass_run
    from tests.chat.audit.test_compare import replayed

    original = two_pass_run(llm_server, UserFactory(username="ada"))
    replica = replayed(llm_server, original)  # a calculator call and two model calls, too
    staff = Client()
    staff.force_login(UserFactory(username="auditor", is_staff=True))

    def figures(query: str) -> tuple[str, dict[str, str], dict[str, str], int]:
        html = staff.get(f"/audit/?{query}").content.decode()
        runs = re.search(r'data-testid="run-count">(\d+)<', html)
        assert runs is not None
        tools = {row[0]: row[1] for row in table_cells(html, "tool-table")}
        models = {row[0]: row[1] for row in table_cells(html, "model-table")}
        return runs.group(1), tools, models, html.split('data-testid="slowest"')[1].count("<li>")

    real = figures("period=hour")
    assert real == ("1", {"calculator": "1"}, {"openai/test-model": "2"}, 1)
    every = figures("period=hour&include_replays=1")
    assert every == ("2", {"calculator": "2"}, {"openai/test-model": "4"}, 2)
    # The CSV of a table counts as its table does.
    for query, calls in (("period=hour", "1"), ("period=hour&include_replays=1", "2")):
        rows = list(
            csv.reader(io.StringIO(staff.get(f"/audit/tools.csv?{query}").content.decode()))
        )
        assert rows[1][:2] == ["calculator", calls]
    # The runs list shows both either way; its filters, pages and periods keep the choice.
    html = staff.get("/audit/?period=hour&include_replays=1&status=completed").content.decode()
    assert f'data-run="{replica.pk}"' in html
    assert '<input type="hidden" name="include_replays" value="1">' in html
    assert "/audit/tools.csv?period=hour&amp;include_replays=1" in html
    assert '<a href="?period=day&amp;include_replays=1&amp;status=completed"' in html
    assert 'href="?period=hour&amp;status=completed"' in html  # leave them out again


def test_the_people_table_says_what_each_person_used_most_tokens_first(staff_client: Client):
    from decimal import Decimal

    from tests.factories import ModelCallFactory, RunFactory, UserFactory

    for name, prompt, cost in (("light", 10, None), ("heavy", 900, "0.5"), ("heavy", 100, None)):
        owner = UserFactory._meta.model.objects.filter(username=name).first()
        owner = owner or UserFactory(username=name)
        run = RunFactory(conversation=ConversationFactory(owner=owner), status="completed")
        ModelCallFactory(
            run=run,
            prompt_tokens=prompt,
            completion_tokens=5,
            cost_usd=None if cost is None else Decimal(cost),
        )
    html = staff_client.get("/audit/?period=hour").content.decode()
    assert table_cells(html, "people-table") == [
        ["heavy", "2", "2", "1,000", "10", "0.5"],
        ["light", "1", "1", "10", "5", "no price"],
    ]
