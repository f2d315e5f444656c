"""Where the focus goes, and the keys people expect, in a real browser on a real uvicorn.

Settings' Save keeps the focus in the panel (and Escape still closes it); a
rename ended with Escape or Enter leaves the focus on its conversation; the
list shows the open conversation whole; a follow-up chip gives the focus back
to the composer; on a narrow screen the sidebar opens over the thread; and
the keyboard shortcuts work and are listed in a help panel that `?` opens, whose
closing leaves the focus where the user moved it.
Screenshots go to screenshots/: chat-sidebar-overlay-375[-dark].png,
chat-shortcuts[-375].png.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from chat.models import Conversation, RunStatus
from tests.factories import ConversationFactory, MessageFactory, RunFactory, UserFactory
from tests.test_chat_page_browser import assert_focus
from tests.test_chat_ui_browser import ask, log_in, new_conversation

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed").expect

pytestmark = [pytest.mark.postgres, pytest.mark.browser]

ANSWER = ".msg-assistant .bubble:visible"
IN_SIDEBAR = "() => document.getElementById('sidebar').contains(document.activeElement)"


def owner() -> object:
    return Conversation._meta.get_field("owner").related_model.objects.get(username="ada")


def open_sidebar_if_narrow(page: Page, width: int) -> None:
    if width < 600:
        page.get_by_role("button", name="Conversations", exact=True).click()
        expect(page.locator("#sidebar")).to_be_visible()


@pytest.mark.parametrize("width", [1280, 375])
def test_settings_save_keeps_the_focus_in_the_panel_and_waits_for_a_change(
    asgi_server: str, page: Page, width: int
):
    page.set_viewport_size({"width": width, "height": 800})
    log_in(page, asgi_server)
    new_conversation(page)
    summary = page.locator("#conversation-settings > summary")
    prompt = page.get_by_label("System prompt")
    save = page.get_by_role("button", name="Save")
    status = page.locator("#settings-status")

    # A draft: nothing to save until the prompt changes, and back to nothing when undone.
    summary.click()
    expect(prompt).to_be_visible()
    expect(save).to_be_disabled()
    prompt.fill("Answer like a pirate.")
    expect(save).to_be_enabled()
    prompt.fill("")
    expect(save).to_be_disabled()
    prompt.fill("Answer like a pirate.")
    save.click()
    expect(status).to_contain_text("created with it")
    expect(save).to_be_disabled()
    expect(prompt).to_be_focused()  # not <body>: Escape still reaches the panel
    page.keyboard.press("Escape")
    expect(prompt).to_be_hidden()
    expect(summary).to_be_focused()

    # An open conversation: Save is a PATCH, and the focus stays where it was.
    ask(page, "what is 2+2")
    expect(page.locator(ANSWER).last).to_contain_text("4")
    summary.click()
    expect(prompt).to_have_value("Answer like a pirate.")
    expect(save).to_be_disabled()
    prompt.fill("Answer in one line.")
    prompt.press("Tab")
    expect(save).to_be_focused()
    page.keyboard.press("Enter")
    expect(status).to_contain_text("applies from the next message")
    expect(save).to_be_disabled()
    expect(prompt).to_be_focused()
    assert page.evaluate("document.activeElement.tagName") != "BODY"
    page.keyboard.press("Escape")
    expect(prompt).to_be_hidden()
    expect(summary).to_be_focused()
    assert Conversation.objects.get().system_prompt == "Answer in one line."


@pytest.mark.parametrize("width", [1280, 375])
def test_a_rename_ended_with_escape_or_enter_keeps_the_focus_on_its_conversation(
    asgi_server: str, page: Page, width: int
):
    page.set_viewport_size({"width": width, "height": 800})
    log_in(page, asgi_server)
    for title in ("Third", "Second", "First"):  # the newest is listed first
        ConversationFactory(owner=owner(), title=title)
    page.reload()
    expect(page.locator("#thread-title")).to_have_text("First")
    open_sidebar_if_narrow(page, width)
    page.locator(".conversation-link", has_text="Second").focus()

    page.keyboard.press("F2")
    expect(page.locator("input.conversation-rename")).to_be_focused()
    page.keyboard.press("Escape")
    assert_focus(page, "link Second")
    expect(page.locator("#sidebar")).to_be_visible()  # Escape ended the edit, not the sidebar
    page.keyboard.press("ArrowDown")
    assert_focus(page, "link Third")

    page.keyboard.press("F2")
    page.keyboard.type("Renamed")
    page.keyboard.press("Enter")
    expect(page.locator(".conversation-link", has_text="Renamed")).to_have_count(1)
    assert_focus(page, "link Renamed")
    # Renamed, it is the latest activity: first in the list, and the arrows go on from there.
    expect(page.locator(".conversation-title").first).to_have_text("Renamed")
    page.keyboard.press("ArrowDown")
    assert_focus(page, "link First")
    page.keyboard.press("ArrowUp")
    assert_focus(page, "link Renamed")
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.keyboard.press("Delete")
    page.wait_for_function("() => true")
    assert len(asked) == 1, asked
    assert "Renamed" in asked[0], asked
    assert Conversation.objects.filter(title="Renamed").exists()


def _shown_whole(page: Page, title: str) -> bool:
    return page.evaluate(_SHOWN_WHOLE, title)


def test_the_list_shows_the_open_conversation_and_a_new_one_whole(asgi_server: str, page: Page):
    page.set_viewport_size({"width": 1280, "height": 800})
    log_in(page, asgi_server)
    for number in range(30, 0, -1):
        ConversationFactory(owner=owner(), title=f"Conversation {number:02}")
    page.reload()
    expect(page.locator(".conversation-link")).to_have_count(30)
    # The item the list's bottom edge cuts in two: opened, it shows whole.
    cut = page.evaluate(
        """() => {
          const list = document.getElementById('conversation-list').getBoundingClientRect();
          const item = Array.from(document.querySelectorAll('.conversation-item')).find((node) => {
            const box = node.getBoundingClientRect();
            return box.top < list.bottom && box.bottom > list.bottom;
          });
          return item ? item.querySelector('.conversation-title').textContent : null;
        }"""
    )
    assert cut is not None, "no item is cut by the list's edge at this size"
    page.locator(".conversation-link", has_text=cut).click()
    expect(page.locator("#thread-title")).to_have_text(cut)
    page.wait_for_function("(title) => (" + _SHOWN_WHOLE + ")(title)", arg=cut, timeout=3000)
    # The last, reached with End and opened with Enter.
    page.keyboard.press("End")
    page.keyboard.press("Enter")
    expect(page.locator("#thread-title")).to_have_text("Conversation 30")
    assert _shown_whole(page, "Conversation 30")
    # A new conversation goes to the top of the list, which scrolls back up to show it.
    new_conversation(page)
    ask(page, "what is 6*7")
    expect(page.locator(ANSWER).last).to_contain_text("42")
    page.wait_for_function("(title) => (" + _SHOWN_WHOLE + ")(title)", arg="what is 6*7")


_SHOWN_WHOLE = """(title) => {
  const list = document.getElementById('conversation-list').getBoundingClientRect();
  const node = Array.from(document.querySelectorAll('.conversation-item'))
    .find((item) => item.textContent.includes(title));
  if (!node) return false;
  const item = node.getBoundingClientRect();
  return item.top >= list.top - 0.5 && item.bottom <= list.bottom + 0.5;
}"""


@pytest.mark.parametrize("width", [1280, 375])
def test_a_follow_up_chip_gives_the_focus_back_to_the_composer(
    asgi_server: str, page: Page, width: int
):
    page.set_viewport_size({"width": width, "height": 800})
    log_in(page, asgi_server)
    new_conversation(page)
    ask(page, "What is 2**10 and what time is it in London?")
    chips = page.locator(".msg-assistant .suggestion-chip")
    expect(chips.first).to_be_visible()
    # Not the question just asked.
    texts = [" ".join(t.split()).casefold() for t in chips.all_text_contents()]
    assert "what is 2**10 and what time is it in london?" not in texts, texts
    chips.first.click()
    expect(page.get_by_label("Message", exact=True)).to_be_focused()
    expect(page.locator(".msg-user")).to_have_count(2)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_at_375_px_the_sidebar_opens_over_the_thread_and_closes_with_escape_or_a_tap(
    asgi_server: str, page: Page, screenshots_dir: Path, scheme: str
):
    page.emulate_media(color_scheme=scheme)
    page.set_viewport_size({"width": 375, "height": 740})
    log_in(page, asgi_server)
    for title in ("Boiler", "Garden"):
        ConversationFactory(owner=owner(), title=title)
    page.reload()
    expect(page.locator("#thread-title")).to_have_text("Garden")
    toggle = page.get_by_role("button", name="Conversations", exact=True)
    composer = page.locator("#composer")
    before = composer.bounding_box()
    assert before is not None

    toggle.click()
    sidebar = page.locator("#sidebar")
    expect(sidebar).to_be_visible()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    page.wait_for_function(IN_SIDEBAR)  # the focus moved into it
    # Over the thread: nothing of the thread moved, and the sidebar covers its top.
    assert composer.bounding_box() == before
    side, header = sidebar.bounding_box(), page.locator(".thread-header").bounding_box()
    assert side is not None
    assert header is not None
    assert side["y"] <= header["y"] + 1, (side, header)
    assert side["width"] < 375  # the thread shows beside it, under the backdrop
    backdrop = page.locator("#sidebar-backdrop")
    expect(backdrop).to_be_visible()
    page.screenshot(
        path=screenshots_dir / f"chat-sidebar-overlay-375{'-dark' if scheme == 'dark' else ''}.png"
    )

    page.keyboard.press("Escape")
    expect(sidebar).to_be_hidden()
    expect(backdrop).to_be_hidden()
    expect(toggle).to_be_focused()

    toggle.click()
    page.wait_for_function(IN_SIDEBAR)
    page.mouse.click(365, 600)  # a tap beside it, on the backdrop
    expect(sidebar).to_be_hidden()
    expect(toggle).to_be_focused()

    # Choosing a conversation closes it too, and the focus has somewhere to be.
    toggle.click()
    page.locator(".conversation-link", has_text="Boiler").click()
    expect(page.locator("#thread-title")).to_have_text("Boiler")
    expect(sidebar).to_be_hidden()
    assert page.evaluate("document.activeElement.tagName") != "BODY"


@pytest.mark.parametrize("width", [1280, 375])
def test_the_keyboard_shortcuts_work_and_are_listed_in_a_help_panel(
    asgi_server: str, page: Page, screenshots_dir: Path, width: int
):
    page.set_viewport_size({"width": width, "height": 800})
    log_in(page, asgi_server)
    new_conversation(page)
    ask(page, "what is 2+2")
    expect(page.locator(ANSWER).last).to_contain_text("4")
    box = page.get_by_label("Message", exact=True)
    help_panel = page.get_by_role("dialog", name="Keyboard shortcuts")

    # `?` while typing is a question mark.
    box.focus()
    page.keyboard.type("?")
    expect(box).to_have_value("?")
    expect(help_panel).to_be_hidden()
    box.fill("")

    # Elsewhere it opens the help, which Escape closes, giving the focus back.
    page.locator("#log").focus()
    page.keyboard.press("?")
    expect(help_panel).to_be_visible()
    for text in ("New conversation", "message box", "Edit your last message", "Stop"):
        expect(help_panel).to_contain_text(text)
    page.screenshot(path=screenshots_dir / f"chat-shortcuts{'' if width == 1280 else '-375'}.png")
    page.keyboard.press("Escape")
    expect(help_panel).to_be_hidden()
    expect(page.locator("#log")).to_be_focused()
    # A visible button opens it too.
    page.get_by_role("button", name="Keyboard shortcuts").click()
    expect(help_panel).to_be_visible()
    page.keyboard.press("Escape")
    expect(help_panel).to_be_hidden()

    # `/` goes to the message box; ↑ in an empty box edits the last message.
    page.locator("#log").focus()
    page.keyboard.press("/")
    expect(box).to_be_focused()
    expect(box).to_have_value("")
    page.keyboard.press("ArrowUp")
    expect(box).to_have_value("what is 2+2")
    expect(page.locator("#composer-editing")).to_be_visible()
    page.keyboard.press("Escape")
    expect(box).to_have_value("")

    # Ctrl+Shift+O starts a new conversation, ready to type in.
    page.keyboard.press("Control+Shift+O")
    expect(page.locator("#thread-title")).to_have_text("New conversation")
    expect(box).to_be_focused()


def test_escape_stops_the_answer_being_written(asgi_server: str, page: Page):
    log_in(page, asgi_server)
    conversation = ConversationFactory(owner=UserFactory(username="ada"))
    trigger = MessageFactory(conversation=conversation, position=0, content="slow question")
    run = RunFactory(conversation=conversation, trigger_message=trigger, status=RunStatus.RUNNING)
    page.goto(f"{asgi_server}/#{conversation.pk}")
    expect(page.locator("#connection")).to_have_text("Live")
    expect(page.get_by_role("button", name="Cancel")).to_be_visible()
    page.get_by_label("Message", exact=True).focus()
    page.keyboard.press("Escape")
    expect(page.locator(".notice-info")).to_contain_text("The run was cancelled.")
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED


def test_the_help_panel_closing_leaves_the_focus_where_the_user_moved_it(
    asgi_server: str, page: Page
):
    # The dialog's close event comes a task after it hid: a click or `/` in between is
    # where the user went, and the panel must not take the focus back to where it opened.
    log_in(page, asgi_server)
    new_conversation(page)
    help_panel = page.get_by_role("dialog", name="Keyboard shortcuts")
    page.get_by_role("button", name="Keyboard shortcuts").click()
    expect(help_panel).to_be_visible()
    went = page.evaluate(
        """() => new Promise((done) => {
            const dialog = document.querySelector("dialog[open]");
            dialog.addEventListener("close", () => setTimeout(() => done(document.activeElement.id)));
            dialog.close();
            document.getElementById("composer-input").focus();
        })"""
    )
    assert went == "composer-input"
    expect(page.get_by_label("Message", exact=True)).to_be_focused()
