"""The chat page's images, in a real browser on a real uvicorn: attached, pasted, sent, shown.

Attach picks image files; a paste of an image in the message box attaches
it; both go with the message over the socket, the embedded offline model says
what it was shown, and the message shows its images in words (a file that is
no image is refused on the page, naming it).
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

import pytest

from chat.models import Message
from tests.chat.openai_api.test_images import png
from tests.test_chat_ui_browser import log_in, new_conversation

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed").expect

pytestmark = [pytest.mark.postgres, pytest.mark.browser]

PASTE = """(data) => {
  const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
  const transfer = new DataTransfer();
  transfer.items.add(new File([bytes], "pasted.png", {type: "image/png"}));
  const box = document.getElementById("composer-input");
  box.dispatchEvent(new ClipboardEvent("paste", {clipboardData: transfer, bubbles: true, cancelable: true}));
}"""


def test_attached_and_pasted_images_go_with_the_message_and_are_shown(asgi_server: str, page: Page):
    log_in(page, asgi_server)
    new_conversation(page, "two_pass")
    page.locator("#composer-file").set_input_files(
        [
            {"name": "wide.png", "mimeType": "image/png", "buffer": png(8, 4)},
            {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"not an image"},
        ]
    )
    expect(page.locator("#composer-error")).to_have_text(
        "notes.txt is not a PNG, JPEG, GIF or WebP image."
    )
    page.evaluate(PASTE, base64.b64encode(png(2, 2)).decode())
    chips = page.locator("#composer-images .composer-image")
    expect(chips).to_have_count(2)
    expect(chips.first).to_contain_text("wide.png")
    expect(chips.last).to_contain_text("pasted.png")
    # One removed and added again: what is sent is what the box shows.
    page.get_by_role("button", name="Remove pasted.png").click()
    expect(chips).to_have_count(1)
    page.evaluate(PASTE, base64.b64encode(png(2, 2)).decode())
    expect(chips).to_have_count(2)

    page.get_by_role("button", name="Send").click()
    expect(chips).to_have_count(0)
    answer = page.locator(".msg-assistant .bubble").last
    expect(answer).to_contain_text("I see 2 images (image/png, 8x4; image/png, 2x2).")
    question = page.locator(".msg-user .msg-images li")
    expect(question).to_have_text(["Image: image/png, 8x4", "Image: image/png, 2x2"])
    (stored,) = Message.objects.filter(role="user")
    assert [(image["width"], image["height"]) for image in stored.images] == [(8, 4), (2, 2)]

    page.reload()
    expect(page.locator(".msg-user .msg-images li")).to_have_text(
        ["Image: image/png, 8x4", "Image: image/png, 2x2"]
    )


def test_images_picked_at_once_past_the_count_or_the_sockets_size_are_refused(
    asgi_server: str, page: Page
):
    log_in(page, asgi_server)
    new_conversation(page, "two_pass")
    # Ten at once: the first eight are still being read when the ninth is looked at.
    page.locator("#composer-file").set_input_files(
        [{"name": f"{n}.png", "mimeType": "image/png", "buffer": png(2, 2)} for n in range(10)]
    )
    expect(page.locator("#composer-error")).to_have_text("At most 8 images a message.")
    expect(page.locator("#composer-images .composer-image")).to_have_count(8)
    page.get_by_role("button", name="Remove 0.png").click()
    # Four images of 3 MiB (4 MiB each as sent) would be a frame past what the socket takes.
    big = png(2, 2) + b"\0" * (3 * 1024 * 1024 - 100)
    for index in range(7):
        page.get_by_role("button", name=f"Remove {index + 1}.png").click()
    page.locator("#composer-file").set_input_files(
        [{"name": f"big{n}.png", "mimeType": "image/png", "buffer": big} for n in range(4)]
    )
    expect(page.locator("#composer-error")).to_contain_text("too large to send together")
    expect(page.locator("#composer-images .composer-image")).to_have_count(3)
