"""Open WebUI, from its own package with its default settings, in front of toolchat's /v1.

Open WebUI is started offline (tests/plugins/openwebui.py) with one OpenAI
connection: toolchat on a real uvicorn, whose model is the scripted server.
Over Open WebUI's own HTTP API, as its page calls it, a user signs up, lists
the models, and chats (streamed, then not), then asks for the chat's title as
Open WebUI's background task does. What toolchat stored is checked: the chat
is one conversation of source `v1` with the user's words, and the task is
not in it and ran none of toolchat's tools.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from rest_framework.authtoken.models import Token

from chat.models import Conversation, Source
from tests.factories import UserFactory
from tests.llm_server import text_reply

pytestmark = [pytest.mark.openwebui, pytest.mark.postgres]

MODEL = "openai/test-model"


def call(url: str, body: Any = None, token: str = "", *, method: str = "POST") -> Any:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            text = response.read().decode()
            kind = response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as error:
        raise AssertionError(f"{url}: {error.code} {error.read().decode()[:500]}") from None
    return text if "event-stream" in kind else json.loads(text)


def streamed_text(sse: str) -> str:
    parts = []
    for line in sse.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            for choice in json.loads(line[6:]).get("choices", []):
                parts.append(choice.get("delta", {}).get("content") or "")
    return "".join(parts)


@pytest.mark.parametrize("forwarded", [False, True], ids=["default settings", "chat id forwarded"])
def test_a_chat_answers_streams_and_its_title_task_stays_apart(
    scripted_server, llm_server, openwebui, forwarded
):
    owner = UserFactory()
    key = Token.objects.create(user=owner).key
    env = {"ENABLE_FORWARD_USER_INFO_HEADERS": "True"} if forwarded else {}
    webui = openwebui(f"{scripted_server}/v1", key, **env)
    try:
        signed = call(
            f"{webui.base_url}/api/v1/auths/signup",
            {"name": "Ada", "email": "ada@example.com", "password": "a-long-passphrase"},
        )
        token = signed["token"]
        models = call(f"{webui.base_url}/api/models", token=token, method="GET")
        assert MODEL in [m["id"] for m in models["data"]]

        made = call(
            f"{webui.base_url}/api/v1/chats/new",
            {"chat": {"title": "New Chat", "models": [MODEL], "messages": []}},
            token,
        )
        chat_id = made["id"]
        question = [{"role": "user", "content": "What is 12*7?"}]
        llm_server.push(text_reply("Twelve times seven is 84."))
        sse = call(
            f"{webui.base_url}/api/chat/completions",
            {"model": MODEL, "messages": question, "stream": True},
            token,
        )
        assert streamed_text(sse) == "Twelve times seven is 84."

        llm_server.push(text_reply("Twice that is 168."))
        follow = [
            *question,
            {"role": "assistant", "content": "Twelve times seven is 84."},
            {"role": "user", "content": "And twice that?"},
        ]
        answer = call(
            f"{webui.base_url}/api/chat/completions",
            {"model": MODEL, "messages": follow, "stream": False},
            token,
        )
        assert answer["choices"][0]["message"]["content"] == "Twice that is 168."

        llm_server.push(text_reply('{"title": "Multiplying twelve"}'))
        title = call(
            f"{webui.base_url}/api/v1/tasks/title/completions",
            {"model": MODEL, "messages": follow, "chat_id": chat_id},
            token,
        )
        assert "Multiplying twelve" in json.dumps(title)
    except Exception:
        print(webui.log_tail())
        raise

    # The chat is one conversation, with the user's words and title.
    chats = Conversation.objects.filter(owner=owner, source=Source.V1)
    assert chats.count() == 1, list(chats.values_list("title", flat=True))
    chat = chats.get()
    assert chat.title == "What is 12*7?"
    said = list(chat.messages.filter(role="user").values_list("content", flat=True))
    assert said == ["What is 12*7?", "And twice that?"]
    # The title task was a conversation of its own, and the model was offered no tool.
    task = Conversation.objects.get(owner=owner, source=Source.TASK)
    assert task.messages.get(role="user").content.startswith("### Task:")
    assert "tools" not in llm_server.requests[-1]
    # The chat's turn was offered toolchat's tools; the task (last) none.
    offered = [t["function"]["name"] for t in llm_server.requests[0].get("tools", [])]
    assert "calculator" in offered
