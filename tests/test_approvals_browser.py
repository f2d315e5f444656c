"""The approvals inbox on the chat page, in a real browser on a real uvicorn: the count of
calls waiting across conversations, a panel that decides them in place (with other arguments,
or for the whole conversation), and every tab of the browser told at once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth import get_user_model

from chat.models import ExecutionStatus, RunStatus, StandingApproval, ToolExecution
from chat.services.runs import run_start
from tests.assertions import wait_until
from tests.factories import ConversationFactory
from tests.test_chat_ui_browser import log_in

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed").expect

pytestmark = [pytest.mark.postgres, pytest.mark.browser]


def waiting(llm_server, conversation, target: str) -> ToolExecution:
    from tests.llm_server import tool_calls_reply

    llm_server.push(tool_calls_reply([("launch_rocket", json.dumps({"target": target}))]))
    run = run_start(conversation=conversation, content=f"launch at {target}")
    wait_until(
        lambda: ToolExecution.objects.filter(
            run=run, status=ExecutionStatus.AWAITING_APPROVAL
        ).exists(),
        what=f"the call at {target} to wait",
    )
    return ToolExecution.objects.get(run=run)


def test_the_inbox_counts_lists_and_decides_calls_of_every_conversation_in_every_tab(
    scripted_server: str, llm_server, page: Page, screenshots_dir: Path, tmp_path, monkeypatch
):
    from tests.llm_server import text_reply

    monkeypatch.setenv("TOOLCHAT_TEST_LEDGER", str(tmp_path / "ledger.txt"))
    log_in(page, scripted_server)
    ada = get_user_model().objects.get(username="ada")
    moon = waiting(llm_server, ConversationFactory(owner=ada, title="Moon trip"), "the moon")
    mars = waiting(llm_server, ConversationFactory(owner=ada, title="Mars trip"), "mars")

    page.reload()
    count = page.get_by_test_id("approvals-count")
    expect(count).to_have_text("2")
    other = page.context.new_page()
    other.goto(page.url)
    expect(other.get_by_test_id("approvals-count")).to_have_text("2")

    page.locator("#approvals > summary").click()
    rows = page.locator("[data-testid=approval]")
    expect(rows).to_have_count(2)
    expect(rows.nth(0).locator(".approval-conversation")).to_have_text("Mars trip")  # newest
    expect(rows.nth(1).locator(".approval-conversation")).to_have_text("Moon trip")
    page.screenshot(path=screenshots_dir / "chat-approvals-inbox.png")

    # Other arguments: the call runs with them, and every tab's count drops at once.
    newest = rows.nth(0)
    newest.get_by_label("Arguments (JSON; change them to approve other ones)").fill(
        '{"target": "venus"'
    )
    newest.get_by_role("button", name="Approve", exact=True).click()
    expect(newest.get_by_role("alert")).to_have_text("The arguments are not valid JSON.")
    newest.get_by_label("Arguments (JSON; change them to approve other ones)").fill('{"target": 7}')
    newest.get_by_role("button", name="Approve", exact=True).click()
    expect(newest.get_by_role("alert")).to_contain_text("arguments.target")
    llm_server.push(text_reply("Off to Venus."), text_reply("Off to the moon."))
    newest.get_by_label("Arguments (JSON; change them to approve other ones)").fill(
        '{"target": "venus"}'
    )
    newest.get_by_role("button", name="Approve", exact=True).click()
    expect(count).to_have_text("1")
    expect(other.get_by_test_id("approvals-count")).to_have_text("1")
    expect(rows).to_have_count(1)
    wait_until(
        lambda: ToolExecution.objects.get(pk=mars.pk).status == ExecutionStatus.SUCCEEDED,
        what="the approved call to run",
    )
    assert ToolExecution.objects.get(pk=mars.pk).approved_arguments == {"target": "venus"}

    # For the whole conversation: a standing approval, and nothing waits any more.
    rows.nth(0).get_by_role("button", name="Approve for this conversation").click()
    expect(count).to_be_hidden()
    expect(other.get_by_test_id("approvals-count")).to_be_hidden()
    expect(page.get_by_text("No tool call waits for you.")).to_be_visible()
    assert StandingApproval.objects.get().conversation_id == moon.run.conversation_id
    for execution in (moon, mars):
        wait_until(
            lambda e=execution: type(e.run).objects.get(pk=e.run_id).status == RunStatus.COMPLETED,
            what="the runs to end",
        )


def test_the_inbox_opens_the_conversation_a_call_waits_in(
    scripted_server: str, llm_server, page: Page, screenshots_dir: Path
):
    log_in(page, scripted_server)
    ada = get_user_model().objects.get(username="ada")
    call = waiting(llm_server, ConversationFactory(owner=ada, title="Rocket"), "mars")
    page.reload()
    for width in (1280, 375):
        page.set_viewport_size({"width": width, "height": 800})
        summary = page.locator("#approvals > summary")
        summary.click()
        expect(page.locator("[data-testid=approval]")).to_have_count(1)
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.screenshot(path=screenshots_dir / f"chat-approvals-{width}.png")
        summary.click()
    page.locator("#approvals > summary").click()
    page.locator(".approval-conversation").click()
    expect(page.locator("#thread-title")).to_have_text("Rocket")
    expect(page.locator(".tool-card .tool-status")).to_have_text("awaiting approval")
    from tests.llm_server import text_reply

    llm_server.push(text_reply("Not launched."))
    page.locator(".tool-card").get_by_role("button", name="Reject").click()
    expect(page.get_by_test_id("approvals-count")).to_be_hidden()
    wait_until(
        lambda: type(call.run).objects.get(pk=call.run_id).status == RunStatus.COMPLETED,
        what="the run to end",
    )
