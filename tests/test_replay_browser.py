"""The chat page's "Try with another model…": a turn replayed and compared, in a real browser.

The server runs the offline model with in-process tasks on the test database.
The turn records a note; its replay on the offline model reuses the recorded
result, so no second note is made. Screenshots go to screenshots/
(gitignored): chat-replay-1280.png, chat-replay-375.png.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from chat.models import Conversation, ExecutionStatus, ToolExecution
from tests.test_chat_ui_browser import ask, log_in, new_conversation
from tools.models import Resource

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed").expect

pytestmark = [pytest.mark.postgres, pytest.mark.browser]


# The page's accent colour, as the browser computes a colour (`rgb(...)`).
ACCENT = """() => {
  const probe = document.createElement("i");
  probe.style.color = "var(--accent)";
  document.body.append(probe);
  const colour = getComputedStyle(probe).color;
  probe.remove();
  return colour;
}"""


@pytest.mark.parametrize("width", [1280, 375])
def test_try_with_another_model_replays_the_turn_and_shows_the_comparison(
    asgi_server: str, page: Page, screenshots_dir: Path, width: int
):
    page.set_viewport_size({"width": width, "height": 900})
    log_in(page, asgi_server)
    new_conversation(page)
    ask(page, "Note that the boiler was serviced today")
    answer = page.locator(".msg-assistant:has(.bubble:visible)").last
    expect(answer.locator(".bubble")).to_contain_text("boiler")
    assert Resource.objects.count() == 1

    answer.hover()
    answer.get_by_role("button", name="Try with another model…").click()
    panel = answer.get_by_test_id("replay-panel")
    expect(panel.get_by_label("Model to replay on")).to_have_value("offline/offline")
    # Replay is the panel's main action, drawn as Send is (Send enabled by a draft).
    replay = panel.get_by_role("button", name="Replay")
    accent = page.evaluate(ACCENT)
    page.get_by_label("Message", exact=True).fill("a draft")
    for button in (replay, page.get_by_role("button", name="Send", exact=True)):
        expect(button).to_have_css("background-color", accent)
        expect(button).to_have_css("color", "rgb(255, 255, 255)")
        expect(button).to_have_css("font-weight", "600")
    page.get_by_label("Message", exact=True).fill("")
    replay.click()

    expect(panel.locator(".replay-status")).to_have_text("On offline/offline:", timeout=30000)
    expect(panel.get_by_test_id("replay-answer")).to_contain_text("boiler")
    expect(panel.locator(".replay-calls")).to_contain_text("record_note")
    expect(panel.locator(".replay-calls")).to_contain_text("recorded result reused")
    expect(panel.locator(".replay-figures")).to_contain_text("Latency")
    assert Resource.objects.count() == 1  # the replay made no second note
    replayed = ToolExecution.objects.get(status=ExecutionStatus.REPLAYED)
    assert replayed.run.conversation.replay_of_id is not None
    # The replay's conversation is not one of the sidebar's.
    expect(page.locator("#conversation-list li")).to_have_count(1)
    assert Conversation.objects.count() == 2
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.screenshot(path=screenshots_dir / f"chat-replay-{width}.png", full_page=True)

    # After a reload the turn's replay is offered again under it, and shown on request.
    page.reload()
    answer = page.locator(".msg-assistant:has(.bubble:visible)").last
    answer.hover()
    answer.get_by_role("button", name="Try with another model…").click()
    panel = answer.get_by_test_id("replay-panel")
    panel.get_by_role("button", name="offline/offline (completed)").click()
    expect(panel.locator(".replay-calls")).to_contain_text("recorded result reused")
    assert ToolExecution.objects.filter(status=ExecutionStatus.REPLAYED).count() == 1
