"""The audit pages and the admin in a real browser, at 1280 px and at 375 px.

The runs are the engine's own, made in this process against the scripted
model server; a real uvicorn serves the pages. Screenshots go to
screenshots/ (gitignored): audit-run-1280.png, audit-run-375.png,
audit-stats-1280.png, audit-stats-375.png, admin-run-1280.png,
admin-messages-1280.png, admin-run-list-{light,dark}-375.png, and the waterfall and the plots alone
(audit-run-375-waterfall.png, audit-stats-375-plots.png, ...).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.chat.audit.scripted import loop_run, two_pass_run
from tests.factories import UserFactory
from tests.test_pages_browser import PASSWORD, log_in

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed").expect

pytestmark = [pytest.mark.postgres, pytest.mark.browser]

WIDTHS = (1280, 375)


@pytest.fixture
def staff_page(asgi_server: str, page: Page) -> Page:
    UserFactory(username="auditor", is_staff=True, is_superuser=True)
    log_in(page, asgi_server, "auditor", PASSWORD)
    expect(page.get_by_role("link", name="Audit")).to_be_visible()
    return page


WIDER_THAN_THE_WINDOW = """
(width) => [...document.querySelectorAll("body *")]
  .filter((el) => el.getBoundingClientRect().right > width + 0.5)
  .filter((el) => !el.closest(".table-wrap, pre"))
  .slice(0, 5)
  .map((el) => `${el.tagName.toLowerCase()}.${el.className.baseVal ?? el.className}`)
"""


def fits(page: Page, width: int) -> None:
    """Nothing makes the page wider than the window."""
    assert page.evaluate("document.documentElement.scrollWidth") <= width, page.evaluate(
        WIDER_THAN_THE_WINDOW, width
    )


def test_the_run_waterfall_at_1280_and_375_px(
    asgi_server: str, staff_page: Page, llm_server, screenshots_dir: Path
):
    owner = UserFactory(username="ada")
    run = loop_run(llm_server, owner, question="Fetch and index my notes, then add 4*10")
    page = staff_page
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{asgi_server}/audit/runs/{run.pk}/#waterfall")
        waterfall = page.get_by_test_id("waterfall")
        expect(waterfall).to_be_visible()
        bars = waterfall.locator("rect.wf-bar")
        expect(bars).to_have_count(3 + 4)  # three model calls, four tool executions
        svg = waterfall.locator("svg").bounding_box()
        assert svg is not None
        assert svg["width"] <= width
        # Every bar is inside the picture, and the labels keep their size.
        for index in range(bars.count()):
            box = bars.nth(index).bounding_box()
            assert box is not None
            assert (
                svg["x"] - 1 <= box["x"] <= box["x"] + box["width"] <= svg["x"] + svg["width"] + 1
            )
        size = waterfall.locator("g.wf-row text").first.evaluate(
            "el => getComputedStyle(el).fontSize"
        )
        assert size == "12px"
        page.screenshot(path=screenshots_dir / f"audit-run-{width}.png", full_page=True)
        waterfall.screenshot(path=screenshots_dir / f"audit-run-{width}-waterfall.png")
        fits(page, width)


def test_the_statistics_page_at_1280_and_375_px(
    asgi_server: str, staff_page: Page, llm_server, screenshots_dir: Path
):
    owner = UserFactory(username="ada")
    two_pass_run(llm_server, owner, question="What is 12*7?")
    two_pass_run(llm_server, owner, question="And what is 6*7, please?")
    loop_run(llm_server, owner, question="Fetch and index my notes, then add 4*10")
    page = staff_page
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{asgi_server}/audit/?period=hour")
        expect(page.get_by_test_id("run-count")).to_have_text("3")
        expect(page.get_by_test_id("latency-histogram")).to_be_visible()
        expect(page.get_by_test_id("runs-over-time")).to_be_visible()
        expect(page.get_by_test_id("tool-table")).to_contain_text("slow_step")
        expect(page.get_by_test_id("model-table")).to_contain_text("test-model")
        expect(page.get_by_test_id("runs")).to_contain_text("And what is 6*7, please?")
        page.screenshot(path=screenshots_dir / f"audit-stats-{width}.png", full_page=True)
        page.locator(".plots").screenshot(path=screenshots_dir / f"audit-stats-{width}-plots.png")
        fits(page, width)

    # The slowest run leads to its waterfall.
    page.set_viewport_size({"width": 1280, "height": 900})
    slowest = page.get_by_test_id("slowest").locator("li").first
    question = slowest.locator(".slow-question").inner_text()
    slowest.get_by_role("link").click()
    expect(page.get_by_test_id("waterfall")).to_be_visible()
    expect(page.get_by_test_id("run-question")).to_have_text(question)


IN_VIEW_AND_UNSCROLLED = """
(selector) => {
  const table = document.querySelector(selector);
  const wrap = table.closest(".table-wrap");
  const cells = [...table.querySelectorAll("tbody td")];
  return {
    scrolls: wrap.scrollWidth > wrap.clientWidth + 1,
    outside: cells.filter((td) => td.getBoundingClientRect().right > window.innerWidth + 0.5)
      .map((td) => td.dataset.label || td.textContent.trim()).slice(0, 5),
    cells: cells.length,
  };
}
"""


def test_at_375_px_the_audits_tables_show_every_column_without_scrolling(
    asgi_server: str, staff_page: Page, llm_server, screenshots_dir: Path
):
    owner = UserFactory(username="ada")
    run = loop_run(llm_server, owner, question="Fetch and index my notes, then add 4*10")
    page = staff_page
    page.set_viewport_size({"width": 375, "height": 900})
    for url, selector, shot in (
        (f"/audit/runs/{run.pk}/", "[data-testid=breakdown]", "audit-steps-375.png"),
        ("/audit/?period=hour", "[data-testid=runs]", "audit-runs-375.png"),
    ):
        page.goto(f"{asgi_server}{url}")
        table = page.locator(selector)
        expect(table).to_be_visible()
        seen = page.evaluate(IN_VIEW_AND_UNSCROLLED, selector)
        assert seen["cells"] > 0, url
        # First token, duration and latency were off-screen, behind a sideways scroll.
        assert (seen["scrolls"], seen["outside"]) == (False, []), (url, seen)
        for label in ("First token", "Duration") if "breakdown" in selector else ("Latency",):
            cell = table.locator(f"tbody td[data-label='{label}']").first
            expect(cell).to_be_visible()
            expect(cell).to_contain_text("ms")
        table.screenshot(path=screenshots_dir / shot)
        fits(page, 375)


CUT = """(td) => [td, ...td.querySelectorAll('*')].filter(
  (el) => el.scrollWidth > el.clientWidth + 1 || el.scrollHeight > el.clientHeight + 1
).map((el) => el.tagName.toLowerCase() + '.' + el.className)"""


def test_at_375_px_the_runs_tables_rows_read_whole(
    asgi_server: str, staff_page: Page, llm_server, screenshots_dir: Path
):
    owner = UserFactory(username="ada")
    loop_run(llm_server, owner, question="Fetch and index my notes, then add 4*10")
    page = staff_page
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        page.set_viewport_size({"width": 375, "height": 900})
        page.goto(f"{asgi_server}/audit/?period=hour")
        row = page.get_by_test_id("runs").locator("tbody tr").first
        # Each cell a line or two beside its label: the message was cut to "Fetc…" and
        # the conversation's cell 18% wide, its name a column of letters 400 px tall.
        for label in ("Message", "Conversation"):
            cell = row.locator(f"td[data-label='{label}']")
            expect(cell).to_be_visible()
            box = cell.bounding_box()
            assert box is not None
            assert box["height"] < 60, (label, box)
            assert cell.evaluate(CUT) == [], label
        expect(row.locator("td[data-label='Message']")).to_contain_text(
            "Fetch and index my notes, then add 4*10"
        )
        row.screenshot(path=screenshots_dir / f"audit-runs-row-375-{scheme}.png")
        fits(page, 375)


def test_the_admin_is_branded_leads_to_the_audit_and_fits_1280_px(
    asgi_server: str, staff_page: Page, llm_server, screenshots_dir: Path
):
    owner = UserFactory(username="ada")
    run = loop_run(llm_server, owner)
    page = staff_page
    failed: list[str] = []
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    page.set_viewport_size({"width": 1280, "height": 900})

    page.goto(f"{asgi_server}/admin/")
    expect(page.locator("#site-name")).to_contain_text("toolchat administration")
    expect(page.locator("#user-tools").get_by_role("link", name="Audit")).to_have_attribute(
        "href", "/audit/"
    )
    page.goto(f"{asgi_server}/admin/chat/message/?role__exact=assistant")
    table = page.locator("#result_list")
    expect(table).to_be_visible()
    page.screenshot(path=screenshots_dir / "admin-messages-1280.png", full_page=True)
    for column in ("latency", "tokens"):
        header = table.locator(f"th.column-{column}")
        box = header.bounding_box()
        assert box is not None, column
        assert box["x"] + box["width"] <= 1280, (column, box)
    # Every list of what happened shows its last column (the time) whole, with real
    # rows: tool messages with their JSON and OpenAI-length call ids, runs, calls.
    for name in ("message", "run", "toolexecution", "modelcall"):
        page.goto(f"{asgi_server}/admin/chat/{name}/")
        expect(page.locator("#result_list")).to_be_visible()
        page.screenshot(path=screenshots_dir / f"admin-{name}-list-1280.png", full_page=True)
        last = page.locator("#result_list thead th").last.bounding_box()
        assert last is not None, name
        assert last["x"] + last["width"] <= 1280, (name, last)
        # The list itself does not scroll sideways.
        assert page.evaluate(
            "(() => { const el = document.querySelector('#changelist .results');"
            " return el.scrollWidth <= el.clientWidth; })()"
        ), name
        fits(page, 1280)

    page.goto(f"{asgi_server}/admin/chat/run/{run.pk}/change/")
    expect(page.get_by_test_id("waterfall").locator("rect.wf-bar")).to_have_count(7)
    page.screenshot(path=screenshots_dir / "admin-run-1280.png", full_page=True)
    page.get_by_role("link", name="Open the timeline").click()
    expect(page.get_by_test_id("waterfall")).to_be_visible()
    assert failed == [], failed  # no 404 for a favicon, or anything else


def test_dark_mode_keeps_the_admins_waterfall_labels_and_the_audits_badges_readable(
    asgi_server: str, staff_page: Page, llm_server, screenshots_dir: Path
):
    from chat.models import Run, RunStatus
    from tests.test_chat_features_browser import _contrast

    owner = UserFactory(username="ada")
    run = loop_run(llm_server, owner)
    page = staff_page
    page.emulate_media(color_scheme="dark")
    page.set_viewport_size({"width": 1280, "height": 900})

    page.goto(f"{asgi_server}/admin/chat/run/{run.pk}/change/")
    label = page.get_by_test_id("waterfall").locator("text.wf-label").first
    expect(label).to_be_visible()
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    fill = label.evaluate("(el) => getComputedStyle(el).fill")
    assert _contrast(fill, background) >= 4.5, (fill, background)
    page.screenshot(path=screenshots_dir / "admin-run-dark-1280.png", full_page=True)

    Run.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED)
    page.goto(f"{asgi_server}/audit/runs/{run.pk}/")
    badge = page.locator(".status-cancelled").first
    expect(badge).to_be_visible()
    colours = badge.evaluate(
        "(el) => [getComputedStyle(el).color, getComputedStyle(el).backgroundColor]"
    )
    page_background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert _contrast(colours[1], page_background) < 2, colours  # no light patch on a dark page
    assert _contrast(colours[0], colours[1]) >= 4.5, colours
    page.screenshot(path=screenshots_dir / "audit-run-cancelled-dark-1280.png", full_page=True)


def test_the_admin_marks_a_truncated_result_only_when_it_was_cut(
    asgi_server: str, staff_page: Page, llm_server, screenshots_dir: Path
):
    from chat.models import ToolExecution

    owner = UserFactory(username="ada")
    run = loop_run(llm_server, owner)
    cut = ToolExecution.objects.filter(run=run).order_by("created_at").first()
    assert cut is not None
    ToolExecution.objects.filter(pk=cut.pk).update(truncated=True)
    page = staff_page
    page.set_viewport_size({"width": 1280, "height": 900})
    for path in ("/admin/chat/toolexecution/", f"/admin/chat/run/{run.pk}/change/"):
        page.goto(f"{asgi_server}{path}")
        # No red "no" icon on every row, which reads as an error: one word, where true.
        expect(page.locator('img[src*="icon-no"]')).to_have_count(0)
        cells = page.locator("td.field-truncated_flag")
        expect(cells).to_have_count(4)
        expect(cells.filter(has_text="truncated")).to_have_count(1)
    page.goto(f"{asgi_server}/admin/chat/toolexecution/")
    page.screenshot(path=screenshots_dir / "admin-tool-executions-1280.png", full_page=True)


SCROLLS_SIDEWAYS = """
(selector) => {
  const el = document.querySelector(selector);
  const wrap = el.closest(".table-wrap") || el;
  return [wrap.scrollWidth, wrap.clientWidth];
}
"""


def long_named_runs() -> None:
    """Runs as a first afternoon makes them: long titles, questions, names, every mark."""
    from django.utils import timezone

    from chat.models import RunStatus
    from tests.factories import ConversationFactory, MessageFactory, RunFactory

    owner = UserFactory(username="margaret.hamilton-longname")
    title = "A conversation about the boiler service history and the heating bills of 2025"
    for index in range(3):
        conversation = ConversationFactory(owner=owner, title=f"{title} ({index})")
        question = MessageFactory(
            conversation=conversation,
            content="Fetch every note about the boiler, summarise what was done, " * 4,
            superseded_at=timezone.now(),
        )
        for status in (RunStatus.FAILED, RunStatus.COMPLETED):
            RunFactory(
                conversation=conversation,
                trigger_message=question,
                status=status,
                latency_ms=1234567,
                started_at=timezone.now(),
                finished_at=timezone.now(),
            )


def test_at_1280_px_the_runs_table_and_the_admins_run_list_fit_without_scrolling(
    asgi_server: str, staff_page: Page, screenshots_dir: Path
):
    long_named_runs()
    page = staff_page
    page.set_viewport_size({"width": 1280, "height": 800})
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for url, selector, shot in (
            ("/audit/?period=hour", "[data-testid=runs]", "audit-runs"),
            ("/admin/chat/run/", "#changelist .results", "admin-run-list"),
        ):
            page.goto(f"{asgi_server}{url}")
            expect(page.locator(selector)).to_be_visible()
            page.locator(selector).screenshot(path=screenshots_dir / f"{shot}-{scheme}-1280.png")
            scroll, client = page.evaluate(SCROLLS_SIDEWAYS, selector)
            assert scroll <= client + 1, (url, scroll, client)
            fits(page, 1280)


@pytest.mark.parametrize("width", [375, 900, 1024])
def test_on_a_phone_or_tablet_the_admins_run_list_fits_and_keeps_what_says_which_run_it_is(
    asgi_server: str, staff_page: Page, screenshots_dir: Path, width: int
):
    long_named_runs()
    page = staff_page
    page.set_viewport_size({"width": width, "height": 800})
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        page.goto(f"{asgi_server}/admin/chat/run/")
        expect(page.locator("#result_list tbody tr")).to_have_count(6)
        page.screenshot(
            path=screenshots_dir / f"admin-run-list-{scheme}-{width}.png", full_page=True
        )
        fits(page, width)
        scroll, client = page.evaluate(SCROLLS_SIDEWAYS, "#changelist .results")
        widths = page.evaluate(
            "[...document.querySelectorAll('#result_list thead th')]"
            ".filter((th) => th.offsetWidth).map((th) => [th.className, th.offsetWidth])"
        )
        assert scroll <= client + 1, (scroll, client, widths)
        # The run (its link), its conversation, status and latency are read on the screen.
        expect(page.locator("#result_list tbody .field-conversation_title").first).to_contain_text(
            "A conversation about the boiler service history"
        )
        for column in ("short_id", "conversation_title", "status", "latency"):
            header = page.locator(f"#result_list thead th.column-{column}")
            expect(header).to_be_visible()
            box = header.bounding_box()
            assert box is not None, column
            assert box["x"] + box["width"] <= width, (column, box)
