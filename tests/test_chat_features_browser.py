"""What people expect of a chat page in 2026, each in a real browser on a real uvicorn.

Markdown answers, Copy / Regenerate / Edit, conversations created by their
first message, renamed, deleted, searched and sorted by activity, those of
API clients shown or hidden, follow-up
chips, resource cards, labelled badges, dark mode, the keyboard, and a cancel
that stops the tool. Screenshots go to screenshots/ (gitignored), named
chat-<feature>[-375].png.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.utils import timezone

from chat.models import (
    Conversation,
    ExecutionStatus,
    Message,
    Run,
    RunEvent,
    Source,
    ToolExecution,
)
from tests.assertions import wait_until, wait_until_on_page
from tests.factories import ConversationFactory, UserFactory
from tests.test_chat_ui_browser import ask, log_in, new_conversation

if TYPE_CHECKING:
    from playwright.sync_api import Page

    from tests.plugins.servers import AsgiServer

expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed").expect

pytestmark = [pytest.mark.postgres, pytest.mark.browser]

ANSWER = ".msg-assistant .bubble:visible"

MARKDOWN_ANSWER = """Here is **the plan**:

1. Service the boiler
2. Check the valve

| part | cost |
|:--|--:|
| filter | 12 |

```python
print("descale")
```

See [the manual](https://example.com/manual) or [this](javascript:window.__xss=1).
<img src=x onerror="window.__xss=1"> ![pixel](https://tracker.example/p.png)"""


def test_an_answer_is_markdown_with_a_copy_button_and_nothing_runs(
    scripted_server: str, llm_server, page: Page, screenshots_dir: Path
):
    from tests.llm_server import text_reply

    llm_server.push(text_reply(MARKDOWN_ANSWER))
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    log_in(page, scripted_server)
    new_conversation(page, "direct")
    ask(page, "plan the boiler service")

    answer = page.locator(".msg-assistant .text.markdown").last
    expect(answer.locator("strong")).to_have_text("the plan")
    expect(answer.locator("ol > li")).to_have_count(2)
    expect(answer.locator("table td").first).to_have_text("filter")
    expect(answer.locator("a", has_text="the manual")).to_have_attribute(
        "href", "https://example.com/manual"
    )
    # No javascript: link, no image (nor its request), no handler ran.
    assert answer.locator("a[href^=javascript]").count() == 0
    assert answer.locator("img").count() == 0
    expect(answer.locator("a", has_text="pixel")).to_have_attribute(
        "href", "https://tracker.example/p.png"
    )
    assert page.evaluate("window.__xss") is None
    # The code block: its language, and a Copy button that copies the code.
    block = answer.locator(".code-block")
    expect(block.locator(".code-language")).to_have_text("python")
    block.get_by_role("button", name="Copy the code").click()
    expect(block.get_by_role("button", name="Copy the code")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == 'print("descale")\n'
    # The whole answer's Copy gives its Markdown source.
    page.locator(".msg-assistant").last.get_by_role("button", name="Copy", exact=True).click()
    assert page.evaluate("navigator.clipboard.readText()") == MARKDOWN_ANSWER
    page.screenshot(path=screenshots_dir / "chat-markdown.png")
    page.reload()
    expect(page.locator(".msg-assistant .text.markdown table")).to_have_count(1)


def test_regenerate_replaces_the_answer_on_the_page_and_keeps_it_on_record(
    scripted_server: str, llm_server, page: Page
):
    from tests.llm_server import text_reply

    llm_server.push(text_reply("First answer."), text_reply("Second answer."))
    log_in(page, scripted_server)
    new_conversation(page, "direct")
    ask(page, "hello")
    expect(page.locator(ANSWER).last).to_have_text("First answer.")
    # Only the last answer offers it.
    page.locator(".msg-assistant").last.get_by_role("button", name="Regenerate").click()

    expect(page.locator(ANSWER).last).to_have_text("Second answer.")
    expect(page.locator(ANSWER)).to_have_count(1)
    expect(page.locator(".msg-user")).to_have_count(1)
    page.reload()
    expect(page.locator(ANSWER)).to_have_text(["Second answer."])
    first = Message.objects.get(content="First answer.")
    assert first.superseded_at is not None
    assert Run.objects.count() == 2


def test_edit_resends_the_last_question_and_escape_cancels(asgi_server: str, page: Page):
    log_in(page, asgi_server)
    new_conversation(page)
    ask(page, "what is 2+2")
    expect(page.locator(ANSWER).last).to_contain_text("4")
    question = page.locator(".msg-user").last
    box = page.get_by_label("Message", exact=True)

    question.get_by_role("button", name="Edit").click()
    expect(box).to_have_value("what is 2+2")
    expect(page.locator("#composer-editing")).to_be_visible()
    box.press("Escape")
    expect(box).to_have_value("")
    expect(page.locator("#composer-editing")).to_be_hidden()

    question.get_by_role("button", name="Edit").click()
    box.fill("what is 3+3")
    expect(page.get_by_role("button", name="Resend")).to_be_enabled()
    box.press("Enter")

    expect(page.locator(ANSWER).last).to_contain_text("6")
    expect(page.locator(".msg-user")).to_have_count(1)
    expect(page.locator(".msg-user")).to_contain_text("what is 3+3")
    page.reload()
    expect(page.locator(".msg-user")).to_have_text(re.compile("what is 3\\+3"))
    expect(page.locator(ANSWER)).to_have_count(1)
    assert Message.objects.filter(superseded_at__isnull=False).count() >= 2


def test_api_clients_conversations_are_marked_and_hidden_on_request_after_a_reload_too(
    asgi_server: str, page: Page, screenshots_dir: Path
):
    log_in(page, asgi_server)
    ada = UserFactory._meta.model.objects.get(username="ada")
    ask(page, "what is 2+2")
    expect(page.locator(ANSWER).last).to_contain_text("4")
    ConversationFactory(owner=ada, title="Asked from a script", source=Source.V1)
    ConversationFactory(owner=ada, title="### Task: a title", source=Source.TASK)
    page.reload()
    items = page.locator(".conversation-item")
    shown = page.get_by_label("Show API clients' conversations")
    expect(shown).to_be_checked()  # by default: they are the person's conversations too
    expect(items).to_have_count(2)  # a client's background task is never listed
    client = items.filter(has_text="Asked from a script")
    expect(client.locator(".conversation-source")).to_have_text("API client")
    expect(items.filter(has_text="what is 2+2").locator(".conversation-source")).to_have_count(0)
    page.screenshot(path=screenshots_dir / "chat-api-clients.png")

    shown.uncheck()
    expect(items).to_have_count(1)
    expect(items.first).to_contain_text("what is 2+2")
    page.reload()  # the choice is remembered
    expect(page.get_by_label("Show API clients' conversations")).not_to_be_checked()
    expect(items).to_have_count(1)
    expect(items.first).to_contain_text("what is 2+2")
    page.get_by_label("Search conversations").fill("script")
    expect(page.locator("#conversations-empty")).to_contain_text("No conversation matches")
    page.get_by_label("Search conversations").fill("")
    page.get_by_label("Show API clients' conversations").check()
    expect(items).to_have_count(2)
    expect(items.filter(has_text="Asked from a script")).to_have_count(1)


def test_conversations_are_made_by_a_message_renamed_deleted_searched_and_sorted(
    asgi_server: str, page: Page, screenshots_dir: Path
):
    log_in(page, asgi_server)
    box = page.get_by_label("Message", exact=True)
    expect(box).to_be_focused()  # no conversation yet: type at once
    for _ in range(2):
        page.get_by_role("button", name="New conversation").click()
    assert not Conversation.objects.exists()  # no empty ones piling up

    ask(page, "what is 2+2")
    expect(page.locator(ANSWER).last).to_contain_text("4")
    new_conversation(page)
    ask(page, "note that the boiler was serviced today")
    expect(page.locator(ANSWER).last).to_contain_text("boiler")
    items = page.locator(".conversation-item")
    expect(items).to_have_count(2)
    expect(items.first).to_contain_text("note that the boiler")  # the latest activity first
    expect(items.first.locator("time")).to_have_text("just now")

    # Back to the first one, and a message there moves it to the top.
    items.nth(1).locator(".conversation-link").click()
    expect(page.locator("#thread-title")).to_have_text("what is 2+2")
    ask(page, "what is 3+3")
    expect(page.locator(ANSWER).last).to_contain_text("6")
    expect(items.first).to_contain_text("what is 2+2")

    # Rename: the sidebar, the header and the database agree, after a reload too.
    items.first.get_by_role("button", name=re.compile("^Rename")).click()
    title = page.get_by_label("New title")
    title.fill("Kitchen maths")
    title.press("Enter")
    expect(items.first.locator(".conversation-title")).to_have_text("Kitchen maths")
    expect(page.locator("#thread-title")).to_have_text("Kitchen maths")
    page.reload()
    expect(page.locator(".conversation-item").first).to_contain_text("Kitchen maths")

    # Search: by title and by what was said.
    search = page.get_by_label("Search conversations")
    search.fill("boiler")
    expect(page.locator(".conversation-item")).to_have_count(1)
    expect(page.locator(".conversation-item")).to_contain_text("note that the boiler")
    search.fill("kitchen")
    expect(page.locator(".conversation-item")).to_have_count(1)
    search.fill("nothing like this")
    expect(page.locator("#conversations-empty")).to_contain_text("No conversation matches")
    page.screenshot(path=screenshots_dir / "chat-search.png")
    search.fill("")
    expect(page.locator(".conversation-item")).to_have_count(2)

    # Delete, after a confirmation; the open conversation becomes a new draft.
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(".conversation-item").first.get_by_role(
        "button", name=re.compile("^Delete")
    ).click()
    expect(page.locator(".conversation-item")).to_have_count(1)
    expect(page.locator("#thread-title")).to_have_text("New conversation")
    assert list(Conversation.objects.values_list("title", flat=True)) == [
        "note that the boiler was serviced today"
    ]
    page.screenshot(path=screenshots_dir / "chat-conversations.png")


@pytest.mark.parametrize("width", [1280, 375])
def test_renaming_shows_the_whole_title_box_and_no_button_over_it(
    asgi_server: str, page: Page, screenshots_dir: Path, width: int
):
    page.set_viewport_size({"width": width, "height": 740})
    log_in(page, asgi_server)
    ask(page, "a question with a rather long first line to rename afterwards")
    expect(page.locator(ANSWER).last).to_be_visible()
    toggle = page.get_by_role("button", name="Conversations")
    if toggle.is_visible() and toggle.get_attribute("aria-expanded") != "true":
        toggle.click()
    item = page.locator(".conversation-item").first
    item.get_by_role("button", name=re.compile("^Rename")).click()
    box = page.get_by_label("New title")
    expect(box).to_be_focused()
    edit = box.bounding_box()
    assert edit is not None
    for button in item.locator("button").all():
        if not button.is_visible():
            continue
        other = button.bounding_box()
        assert other is not None
        overlap = min(edit["x"] + edit["width"], other["x"] + other["width"]) - max(
            edit["x"], other["x"]
        )
        assert overlap <= 0, f"{button.get_attribute('aria-label')} covers the title being edited"
    page.screenshot(path=screenshots_dir / f"chat-rename-{width}.png")
    box.press("Escape")
    expect(item.get_by_role("button", name=re.compile("^Rename"))).to_be_attached()


def test_a_note_shows_a_resource_card_and_a_follow_up_chip_that_sends(
    asgi_server: str, page: Page, screenshots_dir: Path
):
    page.set_viewport_size({"width": 1280, "height": 560})  # the answer fills the log
    log_in(page, asgi_server)
    new_conversation(page)
    ask(page, "note that the boiler was serviced today")

    card = page.locator(".resource-card")
    expect(card).to_contain_text("Note recorded:")
    note = ToolExecution.objects.get(name="record_note").created_resources.get()
    expect(card.locator("a")).to_have_text(note.title)
    href = card.locator("a").get_attribute("href")
    assert href is not None
    assert href.startswith("/api/v1/resources/")  # not staff: the API, not the admin
    record = page.request.get(asgi_server + href)
    assert record.status == 200
    assert record.json()["title"] == note.title

    chip = page.get_by_role("button", name='Search my notes for "boiler"')
    expect(chip).to_be_visible()
    # The model's follow-ups join the tool's, and the log keeps the last of them in view.
    chips = page.locator(".msg-assistant .suggestion-chips").last.get_by_role("button")
    expect(chips).to_have_count(3)
    expect(chips.last).to_be_in_viewport()
    page.screenshot(path=screenshots_dir / "chat-resource-card.png")
    chip.click()
    expect(page.locator(".msg-user").last).to_have_text(re.compile('Search my notes for "boiler"'))
    expect(page.locator(".tool-card .tool-name").last).to_have_text("search_notes")
    expect(page.locator(ANSWER).last).to_contain_text("boiler")
    # Chips belong to the last answer only.
    expect(page.get_by_role("button", name='Search my notes for "boiler"')).to_be_hidden()


def test_a_staff_user_gets_the_admin_link_and_an_audit_link_per_answer(
    asgi_server: str, page: Page
):
    UserFactory(username="grace", is_staff=True)
    log_in(page, asgi_server, username="grace")
    new_conversation(page)
    ask(page, "note that the valve was replaced")
    expect(page.locator(".resource-card a")).to_have_attribute(
        "href", re.compile(r"^/admin/tools/resource/[0-9a-f-]+/change/$")
    )
    audit = page.locator(".msg-assistant .chip-link").last
    run = Run.objects.get()
    expect(audit).to_have_attribute("href", f"/audit/runs/{run.pk}/")
    audit.click()
    expect(page).to_have_url(re.compile(f"/audit/runs/{run.pk}/$"))


@pytest.mark.parametrize("width", [1280, 375])
def test_dark_mode_follows_the_system_and_keeps_everything_readable(
    asgi_server: str, page: Page, screenshots_dir: Path, width: int
):
    page.emulate_media(color_scheme="dark")
    page.set_viewport_size({"width": width, "height": 800})
    log_in(page, asgi_server)
    new_conversation(page)
    ask(page, "note that the boiler was serviced today")
    expect(page.locator(ANSWER).last).to_contain_text("boiler")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    text = page.evaluate("getComputedStyle(document.body).color")
    assert _luminance(background) < 0.02  # dark, and the text on it reads well
    assert _contrast(background, text) >= 7
    bubble = page.locator(ANSWER).last
    assert _luminance(bubble.evaluate("el => getComputedStyle(el).backgroundColor")) < 0.15
    # White text on the user's bubble keeps a contrast of at least 4.5:1 (WCAG AA).
    mine = page.locator(".msg-user .bubble").last
    assert (
        _contrast(mine.evaluate("el => getComputedStyle(el).backgroundColor"), "rgb(255, 255, 255)")
        >= 4.5
    )
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    if width > 600:
        expect(page.locator(".provider-label")).to_contain_text("Model")
    page.screenshot(path=screenshots_dir / f"chat-dark-{width}.png")


def test_the_keyboard_reaches_everything_and_streamed_text_is_announced(
    asgi_server: str, page: Page
):
    log_in(page, asgi_server)
    new_conversation(page)
    ask(page, "note that the boiler was serviced today")
    expect(page.locator(ANSWER).last).to_contain_text("boiler")
    expect(page.get_by_role("button", name="Regenerate")).to_be_visible()  # the run has ended
    log = page.get_by_role("log", name="Messages")
    expect(log).to_have_attribute("aria-live", "polite")
    # From the composer, Shift+Tab walks back through the answer's actions and chips.
    box = page.get_by_label("Message", exact=True)
    box.focus()
    reached = []
    for _ in range(12):
        page.keyboard.press("Shift+Tab")
        reached.append(page.evaluate("document.activeElement.textContent.trim()"))
    assert 'Search my notes for "boiler"' in reached
    assert "Regenerate" in reached
    # A chip is a button: Enter sends it.
    page.get_by_role("button", name='Search my notes for "boiler"').focus()
    page.keyboard.press("Enter")
    expect(page.locator(".tool-card .tool-name").last).to_have_text("search_notes")
    expect(page.locator(ANSWER).last).to_contain_text("Found 1 note")
    # The sidebar: search field, the box of API clients, then the conversation,
    # which Enter opens.
    page.get_by_label("Search conversations").focus()
    page.keyboard.press("Tab")
    expect(page.get_by_label("Show API clients' conversations")).to_be_focused()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.classList.contains('conversation-link')")


def test_cancel_stops_the_tool_and_the_audit_says_cancelled_once(
    asgi_server: str, asgi_server_session: AsgiServer, page: Page, screenshots_dir: Path
):
    received: list[int] = []  # the seq of every event the page's sockets were sent
    page.on(
        "websocket",
        lambda ws: ws.on(
            "framereceived",
            lambda frame: received.extend(
                int(n) for n in re.findall(r'"seq":\s*(\d+)', str(frame))
            ),
        ),
    )
    log_in(page, asgi_server)
    new_conversation(page)
    ask(page, "generate a dataset of 10000 rows")
    progress = page.locator(".tool-progress-text")
    expect(progress).to_contain_text("Generated")
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator(".tool-status")).to_have_text("cancelled")
    cancelled_at = timezone.now()
    expect(progress).to_be_hidden()
    # The worker gives up on the tool once its heartbeat sees the cancel, and from
    # then on the tool's events are dropped: every late one is stored by the time
    # the turn stops. The page is then sent the last of them, and has run it.
    run = Run.objects.get()
    wait_until(
        lambda: f"run {run.pk}: lease lost" in asgi_server_session.log_path.read_text(),
        what="the worker to stop the turn",
    )
    last = RunEvent.objects.filter(run__conversation=run.conversation).order_by("seq").last()
    assert last is not None
    wait_until_on_page(
        page, lambda: max(received, default=0) >= last.seq, what="the page to get every event"
    )
    page.evaluate("() => new Promise((done) => setTimeout(() => setTimeout(done, 0), 0))")
    expect(progress).to_be_hidden()
    # The tool stopped within its heartbeat's look (1 s), and its row says so, once.
    late = RunEvent.objects.filter(type="tool.progress", created_at__gt=cancelled_at)
    assert all(e.created_at < cancelled_at + timedelta(seconds=1.5) for e in late)
    execution = _wait_for_end(ToolExecution.objects.get())
    assert execution.status == ExecutionStatus.CANCELLED
    assert execution.finished_at is not None
    assert execution.duration_ms is not None
    assert execution.duration_ms < 9000  # 10,000 rows take about 10 s
    assert execution.error.count("cancel") <= 1
    # A cancelled turn is offered again as a failed one is: Retry, and Edit on its question.
    retry = page.locator(".notice").get_by_role("button", name="Retry")
    expect(retry).to_be_visible()
    expect(page.locator(".msg-user").last.get_by_role("button", name="Edit")).to_be_visible()
    page.screenshot(path=screenshots_dir / "chat-cancelled.png")
    page.reload()
    expect(page.locator(".tool-status")).to_have_text("cancelled")
    expect(retry).to_be_visible()


def _wait_for_end(execution: ToolExecution) -> ToolExecution:
    wait_until(
        ToolExecution.objects.filter(pk=execution.pk, finished_at__isnull=False).exists,
        what="the tool call's row to be finished",
    )
    execution.refresh_from_db()
    return execution


def _luminance(css_color: str) -> float:
    """The WCAG relative luminance of an `rgb(...)` colour, 0 (black) to 1 (white)."""

    def linear(value: float) -> float:
        return value / 12.92 if value <= 0.04045 else ((value + 0.055) / 1.055) ** 2.4

    red, green, blue = (linear(float(v) / 255) for v in re.findall(r"[\d.]+", css_color)[:3])
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def _contrast(first: str, second: str) -> float:
    """The WCAG contrast ratio of two colours (1 to 21)."""
    lighter, darker = sorted((_luminance(first), _luminance(second)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def test_the_same_features_work_at_375_px(asgi_server: str, page: Page, screenshots_dir: Path):
    page.set_viewport_size({"width": 375, "height": 740})
    log_in(page, asgi_server)
    ask(page, "Note that **the boiler** needs `descaling`: - filter - valve")
    expect(page.locator(".resource-card a")).to_have_text("the boiler needs descaling")
    chip = page.get_by_role("button", name='Search my notes for "boiler"')
    expect(chip).to_be_in_viewport()
    page.screenshot(path=screenshots_dir / "chat-note-375.png")
    chip.click()
    expect(page.locator(ANSWER).last).to_contain_text("Found 1 note")
    last = page.locator(".msg-assistant").last
    last.get_by_role("button", name="Regenerate").click()
    expect(page.locator(".msg-user")).to_have_count(2)
    expect(page.locator(ANSWER).last).to_contain_text("Found 1 note")
    page.locator(".msg-user").last.get_by_role("button", name="Edit").click()
    box = page.get_by_label("Message", exact=True)
    box.fill("What is 2**10 and what time is it in London?")
    box.press("Enter")
    expect(page.locator(ANSWER).last).to_contain_text("1024")
    expect(page.locator(".tool-card")).to_have_count(3)  # the note, and the two calls
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    page.screenshot(path=screenshots_dir / "chat-features-375.png")
    # The sidebar opens on demand: rename there, then it closes on Escape.
    page.get_by_role("button", name="Conversations").click()
    item = page.locator(".conversation-item").first
    item.get_by_role("button", name=re.compile("^Rename")).click()
    page.get_by_label("New title").fill("Boiler and maths")
    page.get_by_label("New title").press("Enter")
    expect(item.locator(".conversation-title")).to_have_text("Boiler and maths")
    page.screenshot(path=screenshots_dir / "chat-sidebar-375.png")
    page.keyboard.press("Escape")
    expect(page.locator("#sidebar")).to_be_hidden()
    expect(page.locator("#thread-title")).to_have_text("Boiler and maths")


def test_only_the_last_turns_failure_offers_retry(scripted_server: str, llm_server, page: Page):
    from tests.llm_server import error_reply, text_reply

    llm_server.push(
        error_reply(400, "first failure"), text_reply("Fine."), error_reply(400, "third failure")
    )
    log_in(page, scripted_server)
    new_conversation(page, "direct")
    ask(page, "one")
    first = page.locator(".notice-error", has_text="first failure")
    expect(first.get_by_role("button", name="Retry")).to_be_visible()
    ask(page, "two")
    expect(page.locator(ANSWER).last).to_have_text("Fine.")
    # Retry answers the last question again: under an older turn it would replace "Fine.".
    expect(first.get_by_role("button", name="Retry")).to_be_hidden()
    ask(page, "three")
    third = page.locator(".notice-error", has_text="third failure")
    expect(third.get_by_role("button", name="Retry")).to_be_visible()
    expect(first.get_by_role("button", name="Retry")).to_be_hidden()
    page.reload()
    expect(page.get_by_role("button", name="Retry")).to_have_count(1)
    expect(third.get_by_role("button", name="Retry")).to_be_visible()


@pytest.mark.parametrize("width", [1280, 375])
def test_export_downloads_the_conversation_as_jsonl(
    asgi_server: str, page: Page, screenshots_dir: Path, width: int
):
    page.set_viewport_size({"width": width, "height": 740})
    log_in(page, asgi_server)
    export = page.get_by_role("link", name="Export")
    expect(export).to_be_hidden()  # a draft has nothing to export
    ask(page, "what is 2+2")
    expect(page.locator(ANSWER).last).to_contain_text("4")
    expect(export).to_be_visible()
    expect(export).to_be_in_viewport()
    page.screenshot(path=screenshots_dir / f"chat-export-{width}.png")
    with page.expect_download() as download_info:
        export.click()
    download = download_info.value
    conversation = Conversation.objects.get()
    assert download.suggested_filename == f"conversation-{conversation.pk}.jsonl"
    lines = Path(download.path()).read_text().splitlines()
    assert len(lines) == 1
    assert "what is 2+2" in lines[0]


@pytest.mark.parametrize("width", [1280, 375])
def test_a_tool_card_uses_the_threads_width_and_opens_to_its_whole_result(
    asgi_server: str, page: Page, screenshots_dir: Path, width: int
):
    page.set_viewport_size({"width": width, "height": 800})
    log_in(page, asgi_server)
    ask(page, "what is 2+2")
    card = page.locator(".tool-card").first
    expect(card.locator(".tool-preview")).to_contain_text("4")
    log = page.locator("#log").bounding_box()
    box = card.bounding_box()
    assert log is not None
    assert box is not None
    assert box["width"] >= 0.85 * log["width"], (box, log)  # not a narrow strip in a wide thread
    assert box["x"] + box["width"] <= width
    card.locator("summary").click()
    expect(card.locator(".tool-pre").last).to_be_visible()
    page.screenshot(path=screenshots_dir / f"chat-tool-card-{width}.png")


@pytest.mark.parametrize("width", [1280, 375])
def test_the_first_tab_stop_skips_to_the_conversation(
    asgi_server: str, page: Page, screenshots_dir: Path, width: int
):
    page.set_viewport_size({"width": width, "height": 740})
    log_in(page, asgi_server)
    ask(page, "what is 2+2")
    expect(page.locator(ANSWER).last).to_contain_text("4")
    page.reload()
    expect(page.locator(ANSWER).last).to_contain_text("4")
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to the conversation")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    page.screenshot(path=screenshots_dir / f"chat-skip-link-{width}.png")
    page.keyboard.press("Enter")
    expect(page.locator("#log")).to_be_focused()


@pytest.mark.parametrize("width", [1280, 375])
def test_an_answer_is_formatted_while_it_streams(
    scripted_server: str, llm_server, page: Page, screenshots_dir: Path, width: int
):
    from tests.llm_server import text_reply

    answer = (
        "Here is **the bold part** and `a code span`, then a list:\n\n- one\n- two\n\n"
        + " ".join(f"word{n}" for n in range(60))
        + "\n\n<script>window.injected = 1</script> [x](javascript:window.injected=2)"
    )
    llm_server.push(text_reply(answer, chunk_delay_s=0.05))
    page.set_viewport_size({"width": width, "height": 800})
    log_in(page, scripted_server)
    new_conversation(page, "direct")
    ask(page, "format something")
    # While the run still streams (its message is aria-busy), the Markdown is already drawn.
    page.wait_for_function(
        """() => {
          const busy = document.querySelector('.msg-assistant[aria-busy="true"] .text');
          return busy && busy.querySelector('strong') && busy.querySelector('code')
            && busy.querySelector('ul li') && !busy.textContent.includes('**');
        }"""
    )
    page.screenshot(path=screenshots_dir / f"chat-streaming-markdown-{width}.png")
    streaming = page.locator('.msg-assistant[aria-busy="true"] .text')
    expect(streaming.locator("strong")).to_have_text("the bold part")
    expect(page.locator(".msg-assistant[aria-busy]")).to_have_count(0)  # the run ended
    final = page.locator(ANSWER).last
    expect(final.locator("strong")).to_have_text("the bold part")
    expect(final.locator("code")).to_have_text("a code span")
    expect(final).to_contain_text("<script>window.injected = 1</script>")
    assert page.evaluate("window.injected") is None
    assert final.locator("a").count() == 0


@pytest.mark.parametrize("width", [1280, 375])
def test_a_code_block_scrolls_inside_its_answer_which_stays_in_the_thread(
    asgi_server: str, page: Page, screenshots_dir: Path, width: int
):
    page.set_viewport_size({"width": width, "height": 800})
    log_in(page, asgi_server)
    ask(page, "Show me code that calls toolchat")
    expect(page.locator(".code-block pre").last).to_contain_text("from openai import OpenAI")
    page.screenshot(path=screenshots_dir / f"chat-code-{width}.png")
    bubble = page.locator(ANSWER).last.bounding_box()
    thread = page.locator(".log").bounding_box()
    assert bubble is not None
    assert thread is not None
    # The long lines scroll inside the code block; the answer never runs past the thread.
    assert bubble["x"] + bubble["width"] <= thread["x"] + thread["width"] + 0.5, (bubble, thread)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
