"""The chat page on narrow and middling screens, light and dark, in a real browser.

At 375 px the message box's placeholder is read whole (the Attach and Send
buttons do not squeeze it into three cut lines); at every width the thread's
title keeps room beside the model picker, and the picker's label, a model no
longer offered included, is read whole where the header has the room for it;
the sidebar's drawer opens on the open conversation, shown whole.
Screenshots go to screenshots/: chat-composer-375[-dark].png,
chat-header-<width>.png.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from chat.models import Conversation
from tests.factories import ConversationFactory
from tests.test_chat_keyboard_browser import _SHOWN_WHOLE, IN_SIDEBAR, owner
from tests.test_chat_offline_providers_browser import LABEL_FITS
from tests.test_chat_offline_providers_browser import two_offline as two_offline
from tests.test_chat_ui_browser import log_in

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed").expect

pytestmark = [pytest.mark.postgres, pytest.mark.browser]

# The placeholder's height, wrapped as the box wraps it (its width, padding and font),
# against the room the box has: more than the room, and its last line is cut.
PLACEHOLDER_ROOM = """(box) => {
  const style = getComputedStyle(box);
  const copy = document.createElement('div');
  for (const name of ['font', 'lineHeight', 'letterSpacing', 'wordSpacing', 'padding']) copy.style[name] = style[name];
  Object.assign(copy.style, {position: 'absolute', visibility: 'hidden', boxSizing: 'border-box',
    whiteSpace: 'pre-wrap', overflowWrap: 'break-word', width: box.clientWidth + 'px'});
  copy.textContent = box.placeholder;
  document.body.appendChild(copy);
  const needed = copy.getBoundingClientRect().height;
  copy.remove();
  return {needed, room: box.clientHeight};
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_at_375_px_the_message_boxs_placeholder_is_read_whole(
    asgi_server: str, page: Page, scheme: str, screenshots_dir: Path
):
    page.emulate_media(color_scheme=scheme)
    page.set_viewport_size({"width": 375, "height": 740})
    log_in(page, asgi_server)
    box = page.get_by_label("Message", exact=True)
    expect(box).to_be_enabled()
    expect(box).to_have_attribute(
        "placeholder", "Message (Enter sends, Shift+Enter for a new line)"
    )
    fit = box.evaluate(PLACEHOLDER_ROOM)
    assert fit["needed"] <= fit["room"] + 0.5, fit
    # The buttons are on the screen, none over the box.
    area = box.bounding_box()
    assert area is not None
    for name in ("Attach images", "Send"):
        button = page.get_by_role("button", name=name, exact=True).bounding_box()
        assert button is not None
        assert button["x"] + button["width"] <= 375, (name, button)
        beside = (
            button["x"] >= area["x"] + area["width"] or button["y"] >= area["y"] + area["height"]
        )
        assert beside, (name, button, area)
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    page.screenshot(
        path=screenshots_dir / f"chat-composer-375{'-dark' if scheme == 'dark' else ''}.png"
    )


@pytest.mark.parametrize("width", [1280, 700, 375])
def test_the_title_keeps_its_room_beside_a_model_no_longer_offered(
    two_offline: str, page: Page, width: int, screenshots_dir: Path
):
    page.set_viewport_size({"width": width, "height": 800})
    log_in(page, two_offline)
    gone = ConversationFactory(
        owner=owner(), title="On a model that went", model="retired/model-v2"
    )
    page.goto(f"{two_offline}/#{gone.pk}")
    title = page.locator("#thread-title")
    expect(title).to_have_text("On a model that went")
    picker = page.locator("#model-picker")
    expect(picker.locator("option:checked")).to_have_text("retired/model-v2 (no longer offered)")
    # The title is read whole (it was squeezed to nothing at 700 px).
    whole = title.evaluate("(el) => el.scrollWidth <= el.clientWidth && el.clientWidth > 0")
    assert whole, title.bounding_box()
    fit = picker.evaluate(LABEL_FITS)
    assert fit["fits"], fit  # "retired/model-v2 (no longer offe" was cut at 700 px
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert Conversation.objects.get(pk=gone.pk).model == "retired/model-v2"
    page.screenshot(path=screenshots_dir / f"chat-header-{width}.png")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_at_375_px_the_drawer_opens_on_the_open_conversation_shown_whole(
    asgi_server: str, page: Page, scheme: str
):
    page.emulate_media(color_scheme=scheme)
    page.set_viewport_size({"width": 375, "height": 740})
    log_in(page, asgi_server)
    made = [
        ConversationFactory(owner=owner(), title=f"Conversation {n:02}") for n in range(30, 0, -1)
    ]
    low = made[5]  # "Conversation 25", far down the list
    page.goto(f"{asgi_server}/#{low.pk}")
    expect(page.locator("#thread-title")).to_have_text("Conversation 25")
    page.get_by_role("button", name="Conversations", exact=True).click()
    expect(page.locator("#sidebar")).to_be_visible()
    page.wait_for_function(IN_SIDEBAR)
    page.wait_for_function("(title) => (" + _SHOWN_WHOLE + ")(title)", arg="Conversation 25")
    expect(page.locator(".conversation-link[aria-current=page]")).to_be_focused()
    # Down from there and Enter: the next one opens and the drawer closes.
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    expect(page.locator("#thread-title")).to_have_text("Conversation 26")
    expect(page.locator("#sidebar")).to_be_hidden()
