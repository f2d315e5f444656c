"""The chat page in a real browser: static/js/ against a real uvicorn.

The server runs the offline model with in-process tasks on the test
PostgreSQL, so a question travels the whole way: the WebSocket, the run,
the calculator tool, the streamed answer. The chat after a tool call is
saved to screenshots/chat.png and chat-tool-call.png (chat-mobile.png at
375 px).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from chat.models import Conversation, Role, RunStatus
from tests.factories import (
    ConversationFactory,
    MessageFactory,
    ResourceFactory,
    RunFactory,
    UserFactory,
)

if TYPE_CHECKING:
    from playwright.sync_api import Page

# Without playwright the module is skipped (a failure under REQUIRE_SERVICES=1).
expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed").expect

pytestmark = [pytest.mark.postgres, pytest.mark.browser]

PASSWORD = "correct horse battery staple"  # the factories' password
XSS = '<img src=x onerror="window.__xss=1">'


def log_in(page: Page, base_url: str, username: str = "ada") -> None:
    UserFactory(username=username)
    page.goto(f"{base_url}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{base_url}/")


def new_conversation(page: Page, mode: str = "two_pass") -> None:
    """Open a new conversation: a draft, created (and connected) by its first message."""
    toggle = page.get_by_role("button", name="Conversations")
    if toggle.is_visible() and toggle.get_attribute("aria-expanded") != "true":
        toggle.click()  # a narrow screen: the sidebar opens on demand
    page.locator("#new-mode").select_option(mode)
    page.get_by_role("button", name="New conversation").click()
    expect(page.locator("#thread-title")).to_have_text("New conversation")
    expect(page.get_by_label("Message", exact=True)).to_be_enabled()


def ask(page: Page, text: str) -> None:
    """Type a message and send it, as soon as the page takes one.

    The page takes none while it knows a run is active (its answer's text may
    show before the run's end does): Enter then leaves the text in the box.
    """
    box = page.get_by_label("Message", exact=True)
    box.fill(text)
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    box.press("Enter")


def test_a_question_gets_a_tool_card_and_an_answer_that_survive_a_reload(
    asgi_server: str, page: Page, screenshots_dir: Path
):
    log_in(page, asgi_server)
    expect(page.get_by_test_id("provider")).to_have_text("offline")
    new_conversation(page, "loop")
    expect(page.get_by_label("Message", exact=True)).to_be_focused()
    assert not Conversation.objects.exists()  # a draft: nothing stored until its first message

    ask(page, "what is 12*7")
    answer = page.locator(".msg-assistant .bubble:visible").last
    expect(answer).to_contain_text("84")
    assert Conversation.objects.get().mode == "loop"
    card = page.locator(".tool-card")
    expect(card).to_have_count(1)
    expect(card.locator(".tool-name")).to_have_text("calculator")
    expect(card.locator(".tool-status")).to_have_text("succeeded")
    expect(card.locator(".tool-args")).to_contain_text('expression="12*7"')
    expect(card.locator(".tool-preview")).to_contain_text("84")
    expect(card.locator(".tool-duration")).to_have_text(re.compile(r"^\d+ ms$"))
    # Per-message badges, and the composer is free again once the run ended.
    # Labelled: what was timed and which tokens are which.
    expect(page.locator(".msg-assistant .chip-call").last).to_have_text(
        re.compile(r"^model \d+ ms · [\d,]+ in / [\d,]+ out$")
    )
    expect(page.locator(".chip-run")).to_contain_text("model call")
    expect(page.get_by_role("button", name="Cancel")).to_be_hidden()
    expect(page.get_by_label("Message", exact=True)).to_have_value("")
    # The first message named the conversation (a PATCH with the CSRF token).
    expect(page.locator(".conversation-link[aria-current]")).to_contain_text("what is 12*7")

    # The card opens to show the arguments and the full result.
    card.locator("summary").click()
    expect(card.locator(".tool-pre").first).to_contain_text('"expression": "12*7"')
    expect(card.locator(".tool-pre").nth(1)).to_contain_text('"result": 84')
    page.screenshot(path=screenshots_dir / "chat.png")
    # test_pages_browser.py also writes chat.png (the empty page); keep this one too.
    page.screenshot(path=screenshots_dir / "chat-tool-call.png")

    page.reload()
    expect(page.locator(".msg-user .text")).to_have_text("what is 12*7")
    expect(page.locator(".msg-assistant .bubble:visible").last).to_contain_text("84")
    expect(page.locator(".tool-card .tool-name")).to_have_text("calculator")
    # Status and duration come from the audit rows after a reload.
    expect(page.locator(".tool-card .tool-status")).to_have_text("succeeded")
    expect(page.locator("#thread-title")).to_have_text("what is 12*7")
    expect(page.locator("#connection")).to_have_text("Live")

    # A second question streams into the same thread, without duplicates.
    ask(page, "what is 2+3")
    expect(page.locator(".msg-user")).to_have_count(2)
    expect(page.locator(".tool-card")).to_have_count(2)
    expect(page.locator(".msg-assistant .bubble:visible").last).to_contain_text("5")
    # One turn badge per turn: the first's came back with the reload.
    expect(page.locator(".chip-run")).to_have_count(2)


def test_markup_from_the_user_the_model_and_tools_is_shown_as_text(asgi_server: str, page: Page):
    log_in(page, asgi_server)
    # History whose model and tool output carry markup, as a hostile tool could.
    conversation = ConversationFactory(owner=UserFactory(username="ada"), title=XSS)
    MessageFactory(conversation=conversation, position=0, role=Role.USER, content="hi")
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "search_notes", "arguments": json.dumps({"query": XSS})},
    }
    MessageFactory(
        conversation=conversation, position=1, role=Role.ASSISTANT, content=None, tool_calls=[call]
    )
    MessageFactory(
        conversation=conversation,
        position=2,
        role=Role.TOOL,
        tool_call_id="call_1",
        name="search_notes",
        content=json.dumps({"success": True, "message": XSS}),
    )
    MessageFactory(conversation=conversation, position=3, role=Role.ASSISTANT, content=XSS)
    page.goto(f"{asgi_server}/#{conversation.pk}")
    expect(page.locator(".msg-assistant .text").last).to_have_text(XSS)
    expect(page.locator(".tool-preview")).to_have_text(XSS)
    expect(page.locator(".conversation-link[aria-current]")).to_contain_text(XSS)
    expect(page.locator("#connection")).to_have_text("Live")

    # And live: the user's own message, and whatever the model answers to it.
    ask(page, XSS)
    expect(page.locator(".msg-user .text").last).to_have_text(XSS)
    expect(page.get_by_role("button", name="Cancel")).to_be_hidden()
    # The run has ended, so its answer is on the page: markup taken as HTML anywhere
    # (the thread, the sidebar, the title) would be an element now, before its image
    # failed to load and its handler ran, so no wait for that handler is needed.
    assert page.locator("#log img").count() == 0
    assert page.locator("[onerror]").count() == 0
    assert page.evaluate("typeof window.__xss") == "undefined"


def test_an_active_run_can_be_cancelled_and_blocks_sending(asgi_server: str, page: Page):
    log_in(page, asgi_server)
    conversation = ConversationFactory(owner=UserFactory(username="ada"))
    trigger = MessageFactory(conversation=conversation, position=0, content="slow question")
    # A run that nothing works on: the page must see it as active.
    run = RunFactory(conversation=conversation, trigger_message=trigger, status=RunStatus.RUNNING)
    page.goto(f"{asgi_server}/#{conversation.pk}")
    expect(page.locator("#connection")).to_have_text("Live")
    cancel = page.get_by_role("button", name="Cancel")
    expect(cancel).to_be_visible()
    page.get_by_label("Message", exact=True).fill("another one")
    expect(page.get_by_role("button", name="Send")).to_be_disabled()

    cancel.click()
    notice = page.locator(".notice-info")
    expect(notice).to_contain_text("The run was cancelled.")
    expect(notice.get_by_role("button", name="Retry")).to_be_visible()  # as a failed turn
    expect(cancel).to_be_hidden()
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED


def test_the_page_works_at_375_px(asgi_server: str, page: Page, screenshots_dir: Path):
    page.set_viewport_size({"width": 375, "height": 740})
    log_in(page, asgi_server)
    # The conversation list folds away behind a toggle.
    new = page.get_by_role("button", name="New conversation")
    expect(new).to_be_hidden()
    toggle = page.get_by_role("button", name="Conversations")
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    new_conversation(page)
    expect(new).to_be_hidden()  # choosing one folds the list again
    expect(toggle).to_have_attribute("aria-expanded", "false")

    ask(page, "what is 12*7")
    expect(page.locator(".tool-card .tool-status")).to_have_text("succeeded")
    expect(page.locator(".msg-assistant .bubble:visible").last).to_contain_text("84")
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    page.screenshot(path=screenshots_dir / "chat-mobile.png")


def test_a_call_that_needs_approval_shows_buttons_that_survive_a_reload_and_go_on(
    scripted_server: str, llm_server, page: Page, screenshots_dir: Path
):
    from tests.llm_server import text_reply, tool_calls_reply
    from tools.models import Resource

    log_in(page, scripted_server)
    from django.contrib.auth import get_user_model

    owner = get_user_model().objects.get(username="ada")
    notes = [ResourceFactory(owner=owner, kind="note", title=f"old note {n}") for n in range(2)]
    ids = json.dumps({"note_ids": [str(note.pk) for note in notes]})
    llm_server.push(tool_calls_reply([("delete_notes", ids)]), text_reply("Both notes are gone."))
    new_conversation(page)

    ask(page, "delete my two old notes")
    card = page.locator(".tool-card")
    expect(card.locator(".tool-status")).to_have_text("awaiting approval")
    expect(card.locator(".tool-approval-text")).to_have_text("Delete 2 notes for good.")
    expect(card.get_by_role("button", name="Approve", exact=True)).to_be_visible()
    page.screenshot(path=screenshots_dir / "chat-approval.png")
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for width in (1280, 375):
            page.set_viewport_size({"width": width, "height": 800})
            page.screenshot(path=screenshots_dir / f"chat-approval-{width}-{scheme}.png")
    page.emulate_media(color_scheme="light")
    page.set_viewport_size({"width": 1280, "height": 800})
    assert Resource.objects.count() == 2  # nothing deleted without a decision

    # After a reload the call still waits, with its buttons.
    page.reload()
    card = page.locator(".tool-card")
    expect(card.get_by_role("button", name="Reject")).to_be_visible()
    # A second tab sees the same; approving in one clears the other, live.
    other = page.context.new_page()
    other.goto(page.url)
    expect(
        other.locator(".tool-card").get_by_role("button", name="Approve", exact=True)
    ).to_be_visible()

    card.get_by_label("Reason (optional)").fill("yes, both")
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator(".msg-assistant .bubble:visible").last).to_contain_text(
        "Both notes are gone."
    )
    expect(card.locator(".tool-status")).to_have_text("succeeded")
    expect(card.locator(".tool-approval")).to_have_count(0)
    expect(other.locator(".tool-card .tool-approval")).to_have_count(0)
    expect(other.locator(".msg-assistant .bubble:visible").last).to_contain_text(
        "Both notes are gone."
    )
    assert not Resource.objects.exists()


def test_approving_a_call_for_the_conversation_on_its_card_lets_the_next_call_run_unasked(
    scripted_server: str, llm_server, page: Page
):
    from chat.models import StandingApproval, ToolExecution
    from tests.llm_server import text_reply, tool_calls_reply
    from tools.models import Resource

    log_in(page, scripted_server)
    from django.contrib.auth import get_user_model

    owner = get_user_model().objects.get(username="ada")
    notes = [ResourceFactory(owner=owner, kind="note", title=f"old note {n}") for n in range(4)]
    pairs = [json.dumps({"note_ids": [str(a.pk), str(b.pk)]}) for a, b in (notes[:2], notes[2:])]
    llm_server.push(tool_calls_reply([("delete_notes", pairs[0])]), text_reply("First two gone."))
    llm_server.push(tool_calls_reply([("delete_notes", pairs[1])]), text_reply("Last two gone."))
    new_conversation(page)

    ask(page, "delete my first two notes")
    card = page.locator(".tool-card")
    always = card.get_by_role("button", name="Approve for this conversation")
    expect(always).to_have_attribute(
        "title", "Later calls of delete_notes in this conversation run without asking"
    )
    always.click()
    expect(page.locator(".msg-assistant .bubble:visible").last).to_contain_text("First two gone.")

    ask(page, "and the other two")
    expect(page.locator(".msg-assistant .bubble:visible").last).to_contain_text("Last two gone.")
    second = page.locator(".tool-card").last
    expect(second.locator(".tool-status")).to_have_text("succeeded")
    assert not Resource.objects.exists()
    standing = StandingApproval.objects.get()
    ran = ToolExecution.objects.order_by("step", "created_at").last()
    assert ran is not None
    assert ran.standing_approval_id == standing.pk
