"""Two offline providers with labels of their own, told apart everywhere a user looks.

A uvicorn serves the app with a TOOLCHAT_PROVIDERS file naming two offline
providers; the model picker, the replay panel and `GET /api/v1/models/` show
their labels, a message's badge says by its label which one wrote it, and the picker's
label is read whole at 1280 px and at 375 px. Screenshots:
chat-offline-providers[-375].png.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from chat.models import Conversation
from tests.plugins.servers import AsgiServer, server_settle
from tests.test_chat_ui_browser import ask, log_in, new_conversation

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed").expect

pytestmark = [pytest.mark.postgres, pytest.mark.browser]

ANSWER = ".msg-assistant .bubble:visible"
FIRST = "The embedded demo model, the one every new machine starts with"
SECOND = "Second offline model, for replays"

# Whether the select's chosen label fits in it whole: its text's width, drawn in the
# select's font, against the room inside the select (its padding and arrow aside).
LABEL_FITS = """(select) => {
  const style = getComputedStyle(select);
  const context = document.createElement('canvas').getContext('2d');
  context.font = style.font;
  const text = context.measureText(select.selectedOptions[0].textContent).width;
  const room = select.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) - 16;
  const box = select.getBoundingClientRect();
  return {text, room, right: box.right, fits: text <= room && box.right <= window.innerWidth};
}"""


@pytest.fixture
def two_offline(asgi_server_session, transactional_db, tmp_path):
    providers = tmp_path / "providers.json"
    providers.write_text(
        json.dumps(
            {
                "providers": {
                    "offline": {"type": "offline", "label": FIRST},
                    "second": {"type": "offline", "label": SECOND},
                }
            }
        )
    )
    env = {
        **asgi_server_session.env,
        "TOOLCHAT_PROVIDERS": str(providers),
        "LLM_MODEL": "offline/offline",
        "LLM_SUGGESTIONS": "off",
    }
    server = AsgiServer(env=env, log_path=tmp_path / "uvicorn-offline-providers.log")
    server.start()
    try:
        yield server.base_url
        server_settle()
    finally:
        server.stop()


def test_two_offline_providers_show_their_own_labels_and_badges(
    two_offline: str, page: Page, screenshots_dir: Path
):
    page.set_viewport_size({"width": 1280, "height": 800})
    log_in(page, two_offline)
    listed = page.request.get(f"{two_offline}/api/v1/models/").json()["results"]
    assert [(m["id"], m["label"]) for m in listed] == [
        ("offline/offline", FIRST),
        ("second/offline", SECOND),
    ]
    picker = page.locator("#model-picker")
    expect(picker.locator("option")).to_have_text([FIRST, SECOND])

    # An answer from each: its badge names the model that wrote it by its label, its id
    # in the badge's title.
    new_conversation(page, "direct")
    picker.select_option("second/offline")
    ask(page, "what is 2+2")
    expect(page.locator(ANSWER).last).to_contain_text("4")
    badge = page.locator(".msg-assistant .chip-model").last
    expect(badge).to_have_text(SECOND)
    expect(badge).to_have_attribute("title", "The model that wrote this: second/offline")
    fit = picker.evaluate(LABEL_FITS)
    assert fit["fits"], fit
    expect(picker).to_have_attribute("title", SECOND)
    picker.select_option("offline/offline")  # the longest label
    expect(picker).to_be_enabled()
    fit = picker.evaluate(LABEL_FITS)
    assert fit["fits"], fit
    picker.select_option("second/offline")
    expect(picker).to_be_enabled()
    page.screenshot(path=screenshots_dir / "chat-offline-providers.png")

    new_conversation(page, "direct")
    expect(picker).to_have_value("offline/offline")
    ask(page, "what is 3+3")
    expect(page.locator(ANSWER).last).to_contain_text("6")
    badge = page.locator(".msg-assistant .chip-model").last
    expect(badge).to_have_text(FIRST)
    expect(badge).to_have_attribute("title", "The model that wrote this: offline")

    # The replay panel offers both, by their labels.
    page.locator(".msg-assistant").last.get_by_role(
        "button", name="Try with another model…"
    ).click()
    replay = page.get_by_label("Model to replay on")
    expect(replay.locator("option")).to_have_text([FIRST, SECOND])

    # At 375 px the picker has a row of its own: its label is read whole there too (a
    # longer one than the row holds is the select's title, and whole in its menu), and
    # nothing is wider than the screen.
    page.set_viewport_size({"width": 700, "height": 740})  # a tablet: nothing overflows
    expect(picker).to_have_attribute("title", FIRST)
    assert page.evaluate("document.documentElement.scrollWidth") <= 700
    page.set_viewport_size({"width": 375, "height": 740})
    picker.select_option("second/offline")
    expect(picker).to_be_enabled()
    fit = picker.evaluate(LABEL_FITS)
    assert fit["fits"], fit
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    menu = replay.bounding_box()
    assert menu is not None
    assert menu["x"] + menu["width"] <= 375, menu  # the replay's picker stays on the screen
    replay.select_option("second/offline")
    expect(replay).to_have_attribute("title", SECOND)
    page.screenshot(path=screenshots_dir / "chat-offline-providers-375.png")
    picker.select_option("offline/offline")
    expect(picker).to_be_enabled()
    expect(picker).to_have_attribute("title", FIRST)
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    # A model no longer offered says so, whole ("no longer offe…" was cut).
    Conversation.objects.filter(model="offline/offline").update(model="gone/offline")
    page.reload()
    expect(picker).to_have_value("gone/offline")
    expect(picker.locator("option:checked")).to_have_text("gone/offline (no longer offered)")
    fit = picker.evaluate(LABEL_FITS)
    assert fit["fits"], fit
