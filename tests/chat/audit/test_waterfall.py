"""A run's waterfall: a bar per model call and tool execution, in proportion, on one axis.

The scripted runs are the engine's own (real openai SDK, scripted model
server, in-process tasks); the synthetic one has times chosen by hand, so
that every gap and total is known.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import timedelta
from html import unescape

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from chat.audit.queries import audit_run_get
from chat.audit.waterfall import run_waterfall
from chat.models import ExecutionStatus, Message, ModelCall, Role, Run, RunStatus, ToolExecution
from chat.services.runs import run_start
from tests.chat.audit.scripted import loop_run, two_pass_run
from tests.factories import (
    ConversationFactory,
    ModelCallFactory,
    RunFactory,
    ToolExecutionFactory,
    UserFactory,
)
from tests.llm_server import text_reply, tool_calls_reply
from tests.stack import wait_for_run

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def staff_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory(username="auditor", is_staff=True))
    return client


def waterfall_svg(html: str) -> ET.Element:
    """The waterfall's <svg>, parsed as XML (so unescaped markup in it would show)."""
    start = html.index('<svg class="waterfall-svg"')
    return ET.fromstring(html[start : html.index("</svg>", start) + len("</svg>")])


def by_class(svg: ET.Element, tag: str, name: str) -> list[ET.Element]:
    return [el for el in svg.iter(f"{SVG}{tag}") if name in (el.get("class") or "").split()]


def pct(value: str | None) -> float:
    assert value is not None
    assert value.endswith("%")
    return float(value[:-1])


def assert_in_proportion(run: Run, bars: list[ET.Element]) -> None:
    """Each bar starts and lasts in proportion to its row's times, on the run's axis."""
    total = (run.finished_at - run.created_at).total_seconds() * 1000
    calls = {str(c.pk): c for c in ModelCall.objects.filter(run=run)}
    tools = {str(t.pk): t for t in ToolExecution.objects.filter(run=run)}
    assert len(bars) == len(calls) + len(tools)
    for bar in bars:
        duration = float(bar.get("data-duration-ms") or "nan")
        start = float(bar.get("data-start-ms") or "nan")
        row = calls.get(bar.get("data-id") or "") or tools[bar.get("data-id") or ""]
        assert bar.get("data-kind") == ("model" if isinstance(row, ModelCall) else "tool")
        began = row.started_at
        assert duration == (row.latency_ms if isinstance(row, ModelCall) else row.duration_ms)
        assert start == pytest.approx((began - run.created_at).total_seconds() * 1000, abs=0.01)
        assert pct(bar.get("width")) == pytest.approx(100 * duration / total, abs=1e-3)
        assert pct(bar.get("x")) == pytest.approx(100 * start / total, abs=1e-3)
        assert pct(bar.get("x")) + pct(bar.get("width")) <= 100.001


@pytest.mark.django_db(transaction=True)
def test_a_two_pass_run_has_a_bar_per_call_in_proportion(llm_server, staff_client: Client):
    run = two_pass_run(llm_server, UserFactory(username="ada"))

    response = staff_client.get(f"/audit/runs/{run.pk}/")

    assert response.status_code == 200
    html = response.content.decode()
    svg = waterfall_svg(html)
    bars = by_class(svg, "rect", "wf-bar")
    assert [bar.get("data-kind") for bar in bars] == ["model", "tool", "model"]
    assert_in_proportion(run, bars)
    # The first token is marked within each model call's bar: at its end for an answer
    # that came in one piece (its first token is its last), to the rounding of the ms.
    marks = by_class(svg, "line", "wf-first-token")
    assert len(marks) == 2
    for mark, bar in zip(marks, [b for b in bars if b.get("data-kind") == "model"], strict=True):
        x = pct(mark.get("x1"))
        assert pct(bar.get("x")) < x <= pct(bar.get("x")) + pct(bar.get("width")) + 1e-3
    # The totals: the model time is the calls' latency.
    model_ms = sum(ModelCall.objects.filter(run=run).values_list("latency_ms", flat=True))
    assert f'<span data-testid="model-ms">{model_ms}</span>' in html


@pytest.mark.django_db(transaction=True)
def test_a_loop_run_puts_parallel_tool_calls_on_parallel_rows(llm_server, staff_client: Client):
    run = loop_run(llm_server, UserFactory(username="ada"))

    html = staff_client.get(f"/audit/runs/{run.pk}/").content.decode()

    bars = by_class(waterfall_svg(html), "rect", "wf-bar")
    assert sorted(bar.get("data-kind") or "" for bar in bars) == ["model"] * 3 + ["tool"] * 4
    assert_in_proportion(run, bars)
    # Each bar has its own row...
    assert len({bar.get("y") for bar in bars}) == len(bars)
    # ...and the two slow calls of step 1 overlap in time, side by side.
    slow = [bar for bar in bars if "slow_step" in (bar.findtext(f"{SVG}title") or "")]
    assert len(slow) == 2
    (a_x, a_w), (b_x, b_w) = [(pct(b.get("x")), pct(b.get("width"))) for b in slow]
    assert a_x < b_x + b_w
    assert b_x < a_x + a_w
    waterfall = run_waterfall(audit_run_get(run_id=run.pk))
    assert waterfall.max_parallel >= 2
    assert waterfall.tool_work_ms > waterfall.tool_ms  # parallel work took less wall time
    assert "at once" in html
    # Queue, model, tools and toolchat's own time add up to the run.
    parts = waterfall.queue_ms + waterfall.model_ms + waterfall.tool_ms + waterfall.overhead_ms
    assert parts == pytest.approx(waterfall.total_ms, abs=1)
    assert waterfall.total_ms == pytest.approx(run.latency_ms, abs=1)


@pytest.mark.django_db(transaction=True)
def test_the_run_header_agrees_with_the_step_table(llm_server, staff_client: Client):
    owner = UserFactory(username="ada")
    for run, steps in ((two_pass_run(llm_server, owner), 2), (loop_run(llm_server, owner), 3)):
        html = staff_client.get(f"/audit/runs/{run.pk}/").content.decode()
        table = html.split('data-testid="breakdown"')[1].split("</table>")[0]
        rows = table.split("<tbody>")[1].split("<tr")[1:]
        step_cells = [row.split('data-label="Step">')[1].split("</td>")[0] for row in rows]
        assert f'<dd data-testid="run-steps">{steps}</dd>' in html
        assert len(set(step_cells)) == steps
        models = sum(1 for row in rows if "kind-model" in row)
        tools = sum(1 for row in rows if "kind-tool" in row)
        assert f'<dd data-testid="run-model-calls">{models}</dd>' in html
        assert f'<dd data-testid="run-tool-calls">{tools}</dd>' in html
        # The run list says the same.
        listing = staff_client.get("/audit/").content.decode()
        row = listing.split(f'data-run="{run.pk}"')[1].split("</tr>")[0]
        shown = [
            row.split(f'data-label="{label}">')[1].split("</td>")[0]
            for label in ("Steps", "Model calls", "Tool calls")
        ]
        assert shown == [str(steps), str(models), str(tools)]


@pytest.mark.django_db(transaction=True)
def test_the_run_page_costs_the_same_queries_for_a_two_pass_or_a_loop_run(
    llm_server, staff_client: Client
):
    owner = UserFactory(username="ada")
    small, large = two_pass_run(llm_server, owner), loop_run(llm_server, owner)
    staff_client.get(f"/audit/runs/{small.pk}/")
    counts = []
    for run in (small, large):
        with CaptureQueriesContext(connection) as queries:
            assert staff_client.get(f"/audit/runs/{run.pk}/").status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1]
    loaded = audit_run_get(run_id=large.pk)
    with CaptureQueriesContext(connection) as none:
        run_waterfall(loaded)
    assert len(none) == 0


@pytest.mark.django_db(transaction=True)
def test_markup_in_a_tool_name_and_a_question_is_escaped_everywhere(
    llm_server, staff_client: Client, admin_client: Client
):
    conversation = ConversationFactory(owner=UserFactory(username="ada"))
    name = "<script>alert(1)</script>"
    llm_server.push(
        tool_calls_reply([(name, "{}", "call_hostile_1")]), text_reply("There is no such tool.")
    )
    question = "<script>alert('question')</script> what now?"
    run = wait_for_run(run_start(conversation=conversation, content=question))
    assert run.status == RunStatus.COMPLETED, run.error
    execution = ToolExecution.objects.get(run=run)
    assert execution.status == ExecutionStatus.FAILED  # no such tool
    # The engine keeps only the characters a tool name may have; a row from elsewhere
    # (an import, an older version) may still hold markup, and must be shown as text.
    assert execution.name == "_script_alert_1___script_"
    ToolExecution.objects.filter(pk=execution.pk).update(name=name)

    pages = {
        "run": staff_client.get(f"/audit/runs/{run.pk}/").content.decode(),
        "overview": staff_client.get("/audit/").content.decode(),
        "conversation": staff_client.get(
            f"/audit/conversations/{conversation.pk}/"
        ).content.decode(),
        "admin run": admin_client.get(f"/admin/chat/run/{run.pk}/change/").content.decode(),
    }
    for page, html in pages.items():
        assert "<script>alert" not in html, page
    for page in ("run", "admin run"):
        svg = waterfall_svg(pages[page])  # parses: nothing in it was taken for markup
        labels = [unescape(el.text or "") for el in by_class(svg, "text", "wf-label")]
        assert any(label.startswith(name) for label in labels), page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages[page]
    for page in ("run", "overview", "conversation"):
        assert (
            "&lt;script&gt;alert(&#x27;question&#x27;)&lt;/script&gt; what now?" in pages[page]
        ), page


# --- A run with times chosen by hand ----------------------------------------------------


def timed_run() -> Run:
    """Created at 0, claimed at 100 ms; model 150-350, tools 400-500 and 420-460, model
    600-900; finished at 1000 ms. So: queued 100, model 500, tools 100 of wall time (140 of
    work), toolchat 300 (the gaps 100-150, 350-400, 500-600, 900-1000)."""
    conversation = ConversationFactory()
    run = RunFactory(conversation=conversation, status=RunStatus.COMPLETED)
    t0 = timezone.now() - timedelta(minutes=1)
    ms = lambda n: t0 + timedelta(milliseconds=n)  # noqa: E731
    Run.objects.filter(pk=run.pk).update(
        created_at=t0, started_at=ms(100), finished_at=ms(1000), latency_ms=1000
    )
    asking = Message.objects.create(
        conversation=conversation, run=run, position=0, role=Role.ASSISTANT, content="x"
    )
    ModelCallFactory(run=run, step=1, started_at=ms(150), latency_ms=200, first_token_ms=50)
    ToolExecutionFactory(run=run, message=asking, name="a", started_at=ms(400), duration_ms=100)
    ToolExecutionFactory(run=run, message=asking, name="b", started_at=ms(420), duration_ms=40)
    ModelCallFactory(run=run, step=2, purpose="compose", started_at=ms(600), latency_ms=300)
    ToolExecution.objects.create(
        run=run, message=asking, step=2, tool_call_id="call_never", name="pending_one"
    )
    return audit_run_get(run_id=run.pk)


@pytest.mark.django_db
def test_the_summary_row_shows_the_queue_and_toolchats_gaps():
    waterfall = run_waterfall(timed_run())

    assert waterfall.total_ms == pytest.approx(1000)
    assert waterfall.queue_ms == pytest.approx(100)
    assert waterfall.model_ms == pytest.approx(500)
    assert waterfall.tool_ms == pytest.approx(100)
    assert waterfall.tool_work_ms == pytest.approx(140)
    assert waterfall.overhead_ms == pytest.approx(300)
    assert waterfall.max_parallel == 2
    assert [(s.kind, round(s.start_ms), round(s.end_ms)) for s in waterfall.segments] == [
        ("queue", 0, 100),
        ("overhead", 100, 150),
        ("model", 150, 350),
        ("overhead", 350, 400),
        ("tool", 400, 500),
        ("overhead", 500, 600),
        ("model", 600, 900),
        ("overhead", 900, 1000),
    ]
    assert [(b.kind, b.x_pct, b.width_pct) for b in waterfall.bars] == [
        ("model", 15.0, 20.0),
        ("tool", 40.0, 10.0),
        ("tool", 42.0, 4.0),
        ("model", 60.0, 30.0),
    ]
    assert waterfall.bars[0].first_token_pct == pytest.approx(20.0)
    assert waterfall.untimed == ["pending_one (pending)"]
    assert [t.label for t in waterfall.ticks] == ["0ms", "200ms", "400ms", "600ms", "800ms", "1s"]


def approved_run() -> Run:
    """Created at 0, claimed at 100; model 150-350; a call stored at 360 waits for a person
    until 5360 (approved), runs 5400-5500; model 5600-5900; finished at 6000. So: queued
    100, model 500, tool 100, waiting for a person 5000, toolchat 300."""
    conversation = ConversationFactory()
    run = RunFactory(conversation=conversation, status=RunStatus.COMPLETED)
    t0 = timezone.now() - timedelta(minutes=1)
    ms = lambda n: t0 + timedelta(milliseconds=n)  # noqa: E731
    Run.objects.filter(pk=run.pk).update(
        created_at=t0, started_at=ms(100), finished_at=ms(6000), latency_ms=6000
    )
    asking = Message.objects.create(
        conversation=conversation, run=run, position=0, role=Role.ASSISTANT, content="x"
    )
    ModelCallFactory(run=run, step=1, started_at=ms(150), latency_ms=200)
    approved = ToolExecutionFactory(
        run=run,
        message=asking,
        name="delete_notes",
        started_at=ms(5400),
        duration_ms=100,
        approved_by=UserFactory(username="demo"),
        decided_at=ms(5360),
    )
    ToolExecution.objects.filter(pk=approved.pk).update(created_at=ms(360))
    ModelCallFactory(run=run, step=2, purpose="compose", started_at=ms(5600), latency_ms=300)
    return audit_run_get(run_id=run.pk)


@pytest.mark.django_db
def test_a_wait_for_a_persons_decision_is_its_own_segment_not_toolchats(staff_client: Client):
    run = approved_run()
    waterfall = run_waterfall(run)

    assert waterfall.approval_ms == pytest.approx(5000)
    assert waterfall.overhead_ms == pytest.approx(300)
    parts = (
        waterfall.queue_ms
        + waterfall.model_ms
        + waterfall.tool_ms
        + waterfall.approval_ms
        + waterfall.overhead_ms
    )
    assert parts == pytest.approx(waterfall.total_ms)
    assert [(s.kind, round(s.start_ms), round(s.end_ms)) for s in waterfall.segments] == [
        ("queue", 0, 100),
        ("overhead", 100, 150),
        ("model", 150, 350),
        ("overhead", 350, 360),
        ("approval", 360, 5360),
        ("overhead", 5360, 5400),
        ("tool", 5400, 5500),
        ("overhead", 5500, 5600),
        ("model", 5600, 5900),
        ("overhead", 5900, 6000),
    ]
    html = staff_client.get(f"/audit/runs/{run.pk}/").content.decode()
    totals = html.split('data-testid="waterfall-totals"')[1].split("</p>")[0]
    assert '<span data-testid="approval-ms">5,000</span>' in totals
    assert '<span data-testid="overhead-ms">300</span>' in totals
    kinds = [s.get("data-kind") for s in by_class(waterfall_svg(html), "rect", "wf-segment")]
    assert "approval" in kinds
    assert "waiting for a person" in html


@pytest.mark.django_db
def test_a_run_still_waiting_for_a_person_is_drawn_waiting_to_now():
    run = RunFactory(status=RunStatus.AWAITING_APPROVAL)
    t0 = timezone.now() - timedelta(seconds=10)
    Run.objects.filter(pk=run.pk).update(created_at=t0, started_at=t0)
    asking = Message.objects.create(
        conversation=run.conversation, run=run, position=0, role=Role.ASSISTANT, content="x"
    )
    ModelCallFactory(run=run, started_at=t0, latency_ms=100)
    waiting = ToolExecution.objects.create(
        run=run,
        message=asking,
        step=1,
        tool_call_id="call_waits",
        name="delete_notes",
        status=ExecutionStatus.AWAITING_APPROVAL,
    )
    ToolExecution.objects.filter(pk=waiting.pk).update(created_at=t0 + timedelta(milliseconds=100))
    waterfall = run_waterfall(audit_run_get(run_id=run.pk))
    assert waterfall.total_ms >= 9900
    assert waterfall.approval_ms == pytest.approx(waterfall.total_ms - 100, abs=1)
    assert waterfall.segments[-1].kind == "approval"


@pytest.mark.django_db
def test_the_admin_run_page_shows_the_same_waterfall(admin_client: Client, staff_client: Client):
    run = timed_run()
    audit = waterfall_svg(staff_client.get(f"/audit/runs/{run.pk}/").content.decode())
    admin = waterfall_svg(admin_client.get(f"/admin/chat/run/{run.pk}/change/").content.decode())
    shown = lambda svg: [(b.get("x"), b.get("width")) for b in by_class(svg, "rect", "wf-bar")]  # noqa: E731
    assert (
        shown(audit)
        == shown(admin)
        == [
            ("15.0%", "20.0%"),
            ("40.0%", "10.0%"),
            ("42.0%", "4.0%"),
            ("60.0%", "30.0%"),
        ]
    )


@pytest.mark.django_db
def test_a_run_still_going_is_drawn_to_its_last_call(staff_client: Client):
    run = RunFactory(status=RunStatus.RUNNING)
    Run.objects.filter(pk=run.pk).update(started_at=run.created_at + timedelta(milliseconds=5))
    ModelCallFactory(run=run, started_at=run.created_at + timedelta(milliseconds=10), latency_ms=90)
    waterfall = run_waterfall(audit_run_get(run_id=run.pk))
    assert waterfall.total_ms == pytest.approx(100)
    assert staff_client.get(f"/audit/runs/{run.pk}/").status_code == 200
    empty = RunFactory(status=RunStatus.QUEUED)
    html = staff_client.get(f"/audit/runs/{empty.pk}/").content.decode()
    assert by_class(waterfall_svg(html), "rect", "wf-bar") == []


@pytest.mark.django_db
def test_the_waterfalls_total_is_the_runs_latency(staff_client: Client, admin_client: Client):
    # 473.6 ms from the post to the end: the run's latency is 473 ms (whole milliseconds,
    # cut as the run's end writes it), and the waterfall used to round its own to 474.
    run = RunFactory(status=RunStatus.COMPLETED)
    Run.objects.filter(pk=run.pk).update(
        started_at=run.created_at + timedelta(milliseconds=5),
        finished_at=run.created_at + timedelta(microseconds=473_600),
        latency_ms=473,
    )
    ModelCallFactory(
        run=run, started_at=run.created_at + timedelta(milliseconds=10), latency_ms=400
    )
    for page in (f"/audit/runs/{run.pk}/", f"/admin/chat/run/{run.pk}/change/"):
        client = staff_client if page.startswith("/audit") else admin_client
        html = client.get(page).content.decode()
        total = re.search(r'class="wf-total"[^>]*><strong>Total</strong> (\d+) ms', html)
        assert total is not None, page
        assert total.group(1) == "473", page
        assert "Where the run's 473 ms went" in html, page
    assert (
        'data-testid="run-latency">473 ms'
        in staff_client.get(f"/audit/runs/{run.pk}/").content.decode()
    )
