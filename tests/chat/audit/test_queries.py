"""The staff audit pages: recent runs with their latency, and a run's timeline as an auditor reads it."""

from __future__ import annotations

import json
from itertools import count

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from chat.audit.queries import (
    audit_run_get,
    audit_run_page,
    run_latency_breakdown,
    run_timeline,
)
from chat.models import (
    CallStatus,
    Conversation,
    ExecutionStatus,
    Message,
    ModelCall,
    Role,
    Run,
    RunStatus,
    ToolExecution,
)
from tests.factories import (
    CallSpec,
    ConversationFactory,
    RunFactory,
    StepSpec,
    UserFactory,
    finished_run,
)
from tools.context import ToolContext
from tools.registry import ToolRegistry, registry

pytestmark = pytest.mark.django_db

_numbers = count(1)

HOSTILE = "<script>alert('pwned')</script>"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "tools/builtin/calculator.py", line 40, in calculator\n'
    "ZeroDivisionError: division by zero"
)


def audited_run(
    conversation: Conversation | None = None,
    *,
    latency_ms: int = 1234,
    status: str = RunStatus.COMPLETED,
) -> Run:
    """A finished two-step run as the engine stores it, with three tool calls.

    search_notes succeeded but its result was cut for the model (truncated);
    calculator failed with a traceback; record_note succeeded with a result
    holding HTML, and made a resource.
    """
    n = next(_numbers)
    long_result = {"success": True, "notes": [f"note number {i}" for i in range(400)]}
    long_text = json.dumps(long_result)
    saved = {"success": True, "message": f"Saved {HOSTILE}"}
    return finished_run(
        conversation or ConversationFactory(),
        question="Find my notes, divide 1 by 0, and note it down.",
        calls=[
            CallSpec(
                "search_notes",
                {"query": "groceries", "limit": 10},
                result=long_result,
                content=f"{long_text[:200]}\n[truncated: 200 of {len(long_text)} characters]",
                truncated=True,
                duration_ms=17,
                tool_call_id=f"call_notes_{n}",
            ),
            CallSpec(
                "calculator",
                {"expression": "1/0"},
                status=ExecutionStatus.FAILED,
                result=None,
                content=json.dumps({"success": False, "error": "division by zero"}),
                error=TRACEBACK,
                duration_ms=2,
                tool_call_id=f"call_calc_{n}",
            ),
            CallSpec(
                "record_note",
                {"title": "Division", "body": HOSTILE},
                result=saved,
                duration_ms=5,
                tool_call_id=f"call_note_{n}",
                resource_title="Division",
            ),
        ],
        answer="I found your notes and saved one; 1/0 has no answer.",
        status=status,
        latency_ms=latency_ms,
        call_step=StepSpec(
            451, 120, 37, ["search_notes", "calculator", "record_note"], first_token_ms=118
        ),
        answer_step=StepSpec(312, 480, 21, message_count=6, first_token_ms=64),
        request_hash=f"{n:064x}",
        events=["run.started", "run.completed"],
    )


SECRET = "hunter2-do-not-show"


def call_with_a_secret(run: Run, monkeypatch: pytest.MonkeyPatch) -> Message:
    """An assistant message of the run calling `sign_in`, a tool whose `password` is sensitive.

    The tool is put in the app's registry for this test only (monkeypatch takes it
    out again), since the staff pages look tools up there.
    """

    def sign_in(ctx: ToolContext, username: str, password: str) -> dict:
        """Sign in to a service."""
        return {"success": True}

    spec = ToolRegistry().register(sign_in, sensitive=["password"])
    monkeypatch.setitem(registry._specs, spec.name, spec)
    arguments = json.dumps({"username": "ada@example.com", "password": SECRET})
    return Message.objects.create(
        conversation=run.conversation,
        run=run,
        position=Message.objects.filter(conversation=run.conversation).count(),
        role=Role.ASSISTANT,
        content=None,
        tool_calls=[
            {
                "id": "call_sign_in",
                "type": "function",
                "function": {"name": "sign_in", "arguments": arguments},
            }
        ],
        finish_reason="tool_calls",
    )


@pytest.fixture
def staff(db):
    return UserFactory(username="auditor", is_staff=True)


@pytest.fixture
def staff_client(staff) -> Client:
    client = Client()
    client.force_login(staff)
    return client


@pytest.fixture
def run() -> Run:
    return audited_run(ConversationFactory(owner=UserFactory(username="ada"), title="Groceries"))


# --- Access ---------------------------------------------------------------------------


PAGES = [
    "/audit/",
    "/audit/runs/{run}/",
    "/audit/conversations/{conversation}/",
    "/audit/tools.csv",
    "/audit/models.csv",
    "/audit/people.csv",
]


@pytest.mark.parametrize("path", PAGES)
def test_anonymous_users_are_sent_to_the_login_page(client: Client, run, path):
    url = path.format(run=run.pk, conversation=run.conversation_id)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={url}"


@pytest.mark.parametrize("path", PAGES)
def test_signed_in_users_who_are_not_staff_are_refused(client: Client, run, path):
    # Even the owner of the run: the audit pages show every user's data.
    client.force_login(run.conversation.owner)
    url = path.format(run=run.pk, conversation=run.conversation_id)
    assert client.get(url).status_code == 403


@pytest.mark.parametrize("path", ["/audit/runs/{id}/", "/audit/conversations/{id}/"])
def test_an_unknown_run_or_conversation_is_not_found(staff_client: Client, path):
    response = staff_client.get(path.format(id="00000000-0000-0000-0000-000000000000"))
    assert response.status_code == 404


@pytest.mark.parametrize("path", PAGES)
def test_the_audit_pages_are_read_only(staff_client: Client, run, path):
    url = path.format(run=run.pk, conversation=run.conversation_id)
    assert staff_client.post(url).status_code == 405


def test_staff_see_an_audit_link_in_the_nav_and_others_do_not(client: Client, staff):
    client.force_login(staff)
    assert 'href="/audit/">Audit</a>' in client.get("/").content.decode()
    client.force_login(UserFactory())
    assert 'href="/audit/"' not in client.get("/").content.decode()


# --- The run list ---------------------------------------------------------------------


def test_the_overview_shows_latency_percentiles_over_the_period(staff_client: Client, run):
    for latency in (100, 200, 300, 400, 1000):
        RunFactory(status=RunStatus.COMPLETED, latency_ms=latency, steps=1, model_calls=2)
    RunFactory(status=RunStatus.QUEUED)  # no latency yet: not in the percentiles

    response = staff_client.get("/audit/")

    assert response.status_code == 200
    html = response.content.decode()
    assert '<link rel="stylesheet" href="/static/css/audit.css">' in html
    assert '<dd data-testid="run-count">7</dd>' in html
    # percentile_cont over 100, 200, 300, 400, 1000, 1234: 350 and 1175.5.
    assert '<dd data-testid="p50">350 ms</dd>' in html
    assert '<dd data-testid="p95">1,176 ms</dd>' in html
    assert f'href="/audit/runs/{run.pk}/"' in html
    assert "1,234 ms" in html
    assert "ada" in html
    assert "Groceries" in html


def test_a_run_row_shows_the_users_message_and_links_its_conversation(staff_client: Client, run):
    html = staff_client.get("/audit/").content.decode()
    row = html.split(f'data-run="{run.pk}"')[1].split("</tr>")[0]
    assert (
        f'<a href="/audit/runs/{run.pk}/" title="Find my notes, divide 1 by 0, and note it down."'
        ' data-testid="question">Find my notes, divide 1 by 0, and note it down.</a>'
    ) in row
    assert f'href="/audit/conversations/{run.conversation_id}/"' in row
    assert "Groceries" in row
    # A long message is cut in the database, not after loading it whole.
    long = audited_run(run.conversation)
    Message.objects.filter(pk=long.trigger_message_id).update(content="x" * 10_000)
    runs = {r.pk: r for r in audit_run_page().object_list}
    assert runs[long.pk].question == "x" * 160


def test_a_conversation_lists_its_runs_oldest_first(staff_client: Client, run, staff):
    later = audited_run(run.conversation)
    Message.objects.filter(pk=later.trigger_message_id).update(content="And then?")
    other = audited_run()

    response = staff_client.get(f"/audit/conversations/{run.conversation_id}/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "<h1>Groceries</h1>" in html
    assert "owner ada" in html
    assert '<dd data-testid="conversation-runs">2</dd>' in html
    assert html.index(f'data-run="{run.pk}"') < html.index(f'data-run="{later.pk}"')
    assert f'data-run="{other.pk}"' not in html
    assert "And then?" in html
    assert f'href="/admin/chat/conversation/{run.conversation_id}/change/"' in html
    assert "in the chat" not in html  # the chat opens only one's own conversations
    mine = audited_run(ConversationFactory(owner=staff))
    html = staff_client.get(f"/audit/conversations/{mine.conversation_id}/").content.decode()
    assert f'href="/#{mine.conversation_id}">in the chat</a>' in html


def test_the_run_page_shows_the_question_and_links_the_conversation(staff_client: Client, run):
    html = staff_client.get(f"/audit/runs/{run.pk}/").content.decode()
    question = html.split('data-testid="run-question">')[1].split("</blockquote>")[0]
    assert 'href="#m0"' in question
    assert "Find my notes, divide 1 by 0, and note it down." in question
    assert (
        f'href="/audit/conversations/{run.conversation_id}/" data-testid="conversation-link"'
        in html
    )


def test_failed_runs_and_runs_with_failed_tools_are_highlighted(staff_client: Client, run):
    failed = RunFactory(status=RunStatus.FAILED, error="model unreachable")
    clean = RunFactory(status=RunStatus.COMPLETED, latency_ms=50)
    page = audit_run_page()
    by_id = {r.pk: r for r in page.object_list}
    assert by_id[run.pk].failed_tools == 1  # the calculator
    assert by_id[run.pk].tool_calls == 3

    html = staff_client.get("/audit/").content.decode()

    rows = {
        r.pk: html.split(f'data-run="{r.pk}"')[0].rsplit("<tr", 1)[1] for r in (run, failed, clean)
    }
    assert 'class="is-failed"' in rows[run.pk]
    assert 'class="is-failed"' in rows[failed.pk]
    assert 'class="is-failed"' not in rows[clean.pk]


def test_the_run_list_filters_by_status(staff_client: Client, run):
    failed = RunFactory(status=RunStatus.FAILED)
    html = staff_client.get("/audit/?status=failed").content.decode()
    runs = html.split('data-testid="runs"')[1].split("</table>")[0]
    assert f"/audit/runs/{failed.pk}/" in runs
    assert f"/audit/runs/{run.pk}/" not in runs
    # An unknown status is ignored rather than an error.
    assert staff_client.get("/audit/?status=bogus").status_code == 200


def test_the_run_list_costs_the_same_queries_for_one_run_or_many(
    staff_client: Client, django_assert_max_num_queries
):
    audited_run()
    staff_client.get("/audit/")  # warm the session
    with CaptureQueriesContext(connection) as one:
        assert staff_client.get("/audit/").status_code == 200
    for _ in range(8):
        audited_run()
    with CaptureQueriesContext(connection) as many:
        assert staff_client.get("/audit/").status_code == 200
    assert len(many) == len(one)
    with django_assert_max_num_queries(2):
        runs = list(audit_run_page().object_list)
    assert len(runs) == 9


# --- One run --------------------------------------------------------------------------


def test_the_selectors_cost_four_queries_whatever_the_run(django_assert_max_num_queries, run):
    with django_assert_max_num_queries(4):
        loaded = audit_run_get(run_id=run.pk)
        timeline = run_timeline(loaded)
        breakdown = run_latency_breakdown(loaded)
        assert loaded.conversation.owner.username == "ada"
    assert [e.message.role for e in timeline.entries] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
        "assistant",
    ]
    assert timeline.entries[1].model_call is not None
    assert timeline.entries[1].model_call.first_token_ms == 118
    assert [e.execution.name for e in timeline.entries[2:5] if e.execution] == [
        "search_notes",
        "calculator",
        "record_note",
    ]
    assert timeline.unreported_executions == []
    assert timeline.unanswered_model_calls == []
    # Step order: the step-1 model call, then its three tools, then the compose call.
    assert [(line.step, line.kind, line.duration_ms) for line in breakdown] == [
        (1, "model", 451),
        (1, "tool", 17),
        (1, "tool", 2),
        (1, "tool", 5),
        (2, "model", 312),
    ]
    assert [line.failed for line in breakdown] == [False, False, True, False, False]


def test_the_run_page_costs_the_same_queries_for_a_small_or_a_large_run(staff_client: Client, run):
    staff_client.get(f"/audit/runs/{run.pk}/")
    with CaptureQueriesContext(connection) as small:
        staff_client.get(f"/audit/runs/{run.pk}/")
    larger = audited_run(run.conversation)
    # Three more steps of tool calls on the same run.
    extra = ToolExecution.objects.filter(run=larger)
    for execution in list(extra):
        for i in range(3):
            ToolExecution.objects.create(
                run=larger,
                message=execution.message,
                step=2 + i,
                tool_call_id=f"{execution.tool_call_id}_{i}",
                name=execution.name,
                status=ExecutionStatus.PENDING,
            )
    with CaptureQueriesContext(connection) as large:
        assert staff_client.get(f"/audit/runs/{larger.pk}/").status_code == 200
    assert len(large) == len(small)


def test_the_run_page_shows_the_timeline_with_latency_and_tokens(staff_client: Client, run):
    response = staff_client.get(f"/audit/runs/{run.pk}/")

    assert response.status_code == 200
    html = response.content.decode()
    assert '<link rel="stylesheet" href="/static/css/audit.css">' in html
    assert '<dd data-testid="run-latency">1,234 ms</dd>' in html
    # The assistant messages with their latency, time to first token and usage.
    assert "451 ms" in html
    assert "first token 118 ms" in html
    assert "120 → 37 tokens" in html
    assert "312 ms" in html
    assert "first token 64 ms" in html
    assert "480 → 21 tokens" in html
    assert "I found your notes and saved one; 1/0 has no answer." in html
    # The messages come in their order.
    order = [html.index(f'id="m{p}"') for p in range(6)]
    assert order == sorted(order)
    # The per-step breakdown.
    breakdown = html.split('data-testid="breakdown"')[1].split("</table>")[0]
    assert breakdown.index("search_notes") < breakdown.index("calculator")
    assert breakdown.index("calculator") < breakdown.index("Compose the answer")
    assert "17 ms" in breakdown


def test_the_run_page_shows_raw_result_against_what_the_model_was_sent(staff_client: Client, run):
    html = staff_client.get(f"/audit/runs/{run.pk}/").content.decode()
    notes = ToolExecution.objects.get(run=run, name="search_notes")

    section = html.split(f'data-testid="execution-{notes.tool_call_id}"')[1].split(
        'data-testid="execution-'
    )[0]
    raw = section.split('data-testid="raw-result">')[1].split("</pre>")[0]
    sent = section.split('data-testid="sent-content">')[1].split("</pre>")[0]
    # The whole raw result, pretty-printed, against the cut text the model saw.
    assert "note number 399" in raw
    # Pretty-printed (PostgreSQL's JSONB keeps its own key order, so only the shape is checked).
    assert raw.startswith("{\n  &quot;")
    assert "&quot;success&quot;: true" in raw
    assert "note number 399" not in sent
    assert "[truncated: 200 of" in sent
    assert 'class="flag flag-truncated"' in section
    assert f"{notes.result_chars:,} chars" in section
    assert "17 ms" in section
    assert "&quot;query&quot;: &quot;groceries&quot;" in section  # the arguments


def test_the_run_page_shows_a_failed_tool_with_its_traceback(staff_client: Client, run):
    html = staff_client.get(f"/audit/runs/{run.pk}/").content.decode()
    calc = ToolExecution.objects.get(run=run, name="calculator")

    section = html.split(f'data-testid="execution-{calc.tool_call_id}"')[1].split(
        'data-testid="execution-'
    )[0]
    assert "is-failed" in section
    assert "ZeroDivisionError: division by zero" in section
    assert "Traceback (most recent call last):" in section
    assert "&quot;error&quot;: &quot;division by zero&quot;" in section  # what the model was sent


def test_html_in_tool_results_and_arguments_is_shown_as_text(staff_client: Client, run):
    html = staff_client.get(f"/audit/runs/{run.pk}/").content.decode()
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in html


def test_a_failed_model_call_and_a_pending_tool_call_are_shown(staff_client: Client, run):
    now = timezone.now()
    ModelCall.objects.create(
        run=run,
        step=3,
        purpose="compose",
        model="test-model",
        provider="openai",
        status=CallStatus.FAILED,
        error="APITimeoutError: Request timed out.",
        started_at=now,
        latency_ms=30000,
        attempts=3,
    )
    ToolExecution.objects.create(
        run=run,
        message=Message.objects.get(run=run, position=1),
        step=3,
        tool_call_id="call_waiting",
        name="record_note",
        status=ExecutionStatus.AWAITING_APPROVAL,
        arguments={"title": "later"},
    )

    html = staff_client.get(f"/audit/runs/{run.pk}/").content.decode()

    assert "Model calls without a message" in html
    assert "APITimeoutError: Request timed out." in html
    assert "30,000 ms" in html
    assert "Tool calls without a tool message" in html
    assert 'data-testid="execution-call_waiting"' in html
    assert "Awaiting approval" in html


def test_the_run_page_summary_for_staff(staff_client: Client, run):
    html = staff_client.get(f"/audit/runs/{run.pk}/").content.decode()
    assert f'href="/admin/chat/run/{run.pk}/change/"' in html
    assert "Groceries" in html
    assert "owner ada" in html


def test_sensitive_arguments_of_a_tool_call_are_masked_on_the_run_page(
    staff_client: Client, run, monkeypatch
):
    call_with_a_secret(run, monkeypatch)

    html = staff_client.get(f"/audit/runs/{run.pk}/").content.decode()

    assert SECRET not in html
    calls = html.split("<code>sign_in</code>")[1].split("</li>")[0]
    assert "&quot;password&quot;: &quot;***&quot;" in calls
    assert "&quot;username&quot;: &quot;ada@example.com&quot;" in calls  # only the secret goes
