"""The model picker: two providers in one file, a conversation on each, in a real browser.

A uvicorn serves the app with a TOOLCHAT_PROVIDERS file naming two scripted
model servers, `cloud` and `local`; the picker in the thread's header chooses
the model of the draft and of an open conversation, and each answer comes
from the server its conversation picked.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from chat.models import Conversation
from tests.llm_server import ScriptedLLMServer, text_reply
from tests.plugins.servers import AsgiServer, server_settle
from tests.test_chat_ui_browser import ask, log_in, new_conversation

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed").expect

pytestmark = [pytest.mark.postgres, pytest.mark.browser]

ANSWER = ".msg-assistant .bubble:visible"


@pytest.fixture
def two_providers(asgi_server_session, transactional_db, tmp_path):
    cloud, local = ScriptedLLMServer().start(), ScriptedLLMServer().start()
    providers = tmp_path / "providers.json"
    providers.write_text(
        json.dumps(
            {
                "providers": {
                    "cloud": {
                        "baseUrl": cloud.base_url,
                        "apiKey": "sk-cloud",
                        "models": ["big", "small"],
                        "label": "Cloud",
                    },
                    "local": {
                        "baseUrl": local.base_url,
                        "apiKey": "none",
                        "models": ["qwen3"],
                        "systemPrompt": "You are the local model.",
                    },
                }
            }
        )
    )
    env = {
        **asgi_server_session.env,
        "TOOLCHAT_PROVIDERS": str(providers),
        "LLM_MODEL": "cloud/big",
        "LLM_SUGGESTIONS": "off",
    }
    server = AsgiServer(env=env, log_path=tmp_path / "uvicorn-providers.log")
    server.start()
    try:
        yield server.base_url, cloud, local
        server_settle()
    finally:
        server.stop()
        cloud.stop()
        local.stop()


def test_the_picker_chooses_each_conversations_model_and_remembers_it(
    two_providers, page: Page, screenshots_dir: Path
):
    base_url, cloud, local = two_providers
    cloud.push(text_reply("From the cloud."), text_reply("Small and quick."))
    local.push(text_reply("From the local model."))
    log_in(page, base_url)
    picker = page.locator("#model-picker")
    expect(picker.locator("option")).to_have_text(["big · Cloud", "small · Cloud", "qwen3 · local"])
    expect(picker).to_have_value("cloud/big")  # the default
    prompt = page.locator("#system-prompt")
    expect(prompt).to_have_attribute("placeholder", re.compile("helpful assistant"))

    # A draft on the local model: created with it, answered by it. Settings show what a
    # conversation there is told by default: its provider's prompt.
    new_conversation(page, "direct")
    picker.select_option("local/qwen3")
    expect(prompt).to_have_attribute("placeholder", "You are the local model.")
    ask(page, "hello local")
    expect(page.locator(ANSWER).last).to_have_text("From the local model.")
    on_local = Conversation.objects.get()
    assert on_local.model == "local/qwen3"
    assert [r["model"] for r in local.requests] == ["qwen3"]
    page.screenshot(path=screenshots_dir / "chat-model-picker.png")

    # Another on the default, answered by the cloud.
    new_conversation(page, "direct")
    expect(picker).to_have_value("cloud/big")
    ask(page, "hello cloud")
    expect(page.locator(ANSWER).last).to_have_text("From the cloud.")
    on_cloud = Conversation.objects.exclude(pk=on_local.pk).get()
    assert on_cloud.model == ""  # the default, whichever it becomes

    # An open conversation's model changes at once, and stays changed after a reload.
    picker.select_option("cloud/small")
    expect(picker).to_be_enabled()
    page.wait_for_function("() => !document.querySelector('#model-picker').disabled")
    ask(page, "and now?")
    expect(page.locator(ANSWER).last).to_have_text("Small and quick.")
    assert [r["model"] for r in cloud.requests] == ["big", "small"]
    page.reload()
    expect(picker).to_have_value("cloud/small")
    page.goto(f"{base_url}/#{on_local.pk}")
    expect(page.locator(ANSWER).last).to_have_text("From the local model.")
    expect(picker).to_have_value("local/qwen3")
    expect(prompt).to_have_attribute("placeholder", "You are the local model.")
