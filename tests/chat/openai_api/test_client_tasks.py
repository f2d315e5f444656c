"""A /v1 client's background tasks (Open WebUI's title, tags, follow-ups) beside its chat.

Each task is a request whose one message is the task prompt quoting the chat;
with Open WebUI's forwarded chat id it names the chat's conversation too. It
must be answered by the model without toolchat's tools, in a conversation of
its own left out of the list, and never stand in the way of the chat's turn.
"""

from __future__ import annotations

import pytest

from chat.models import Conversation, Message, Run, RunStatus, Source
from tests.chat.api.conftest import token_client
from tests.llm_server import text_reply, tool_calls_reply

MODEL = "openai/test-model"
URL = "/v1/chat/completions"
CHAT_ID = {"HTTP_X_OPENWEBUI_CHAT_ID": "owui-chat-1"}
TITLE_PROMPT = (
    "### Task:\nGenerate a concise, 3-5 word title with an emoji summarizing the chat history.\n"
    '### Guidelines:\n- Output JSON.\n### Output:\nJSON format: { "title": "..." }\n'
    "### Chat History:\n<chat_history>\nUSER: What is 12*7?\nASSISTANT: 84.\n</chat_history>"
)


def post(client, messages, **headers):
    body = {"model": MODEL, "messages": messages, "stream": False}
    return client.post(URL, body, format="json", **headers)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("headers", [CHAT_ID, {}], ids=["chat id forwarded", "no chat id"])
def test_a_title_task_is_answered_apart_from_the_chat_and_without_tools(
    v1, user, llm_server, headers
):
    llm_server.push(text_reply("84."))
    chat = [{"role": "user", "content": "What is 12*7?"}]
    first = post(v1, chat, **headers)
    assert first.status_code == 200, first.json()
    conversation = Conversation.objects.get(pk=first["X-Toolchat-Conversation-Id"])
    stored = list(conversation.messages.values_list("role", "content"))

    llm_server.push(text_reply('{"title": "🔢 Twelve times seven"}'))
    task = post(v1, [{"role": "user", "content": TITLE_PROMPT}], **headers)
    assert task.status_code == 200, task.json()
    assert task.json()["choices"][0]["message"]["content"] == '{"title": "🔢 Twelve times seven"}'
    # The model was asked the task alone, and offered no tool.
    sent = llm_server.requests[-1]
    assert "tools" not in sent
    assert sent["messages"][-1] == {"role": "user", "content": TITLE_PROMPT}
    # The chat's conversation is as it was: its history, its title, its source.
    conversation.refresh_from_db()
    assert list(conversation.messages.values_list("role", "content")) == stored
    assert (conversation.title, conversation.source) == ("What is 12*7?", Source.V1)
    held = Conversation.objects.get(pk=task["X-Toolchat-Conversation-Id"])
    assert held.pk != conversation.pk
    assert held.source == Source.TASK
    assert held.title.startswith("Generate a concise")
    assert Run.objects.get(pk=task["X-Toolchat-Run-Id"]).client_options["toolchat_tools"] is False
    # The user's list holds the chat, not the task.
    listed = token_client(user).get("/api/v1/conversations/").json()["results"]
    assert [(c["id"], c["source"]) for c in listed] == [(str(conversation.pk), "v1")]

    # The chat goes on in its own conversation.
    llm_server.push(text_reply("168."))
    chat += [{"role": "assistant", "content": "84."}, {"role": "user", "content": "Times 2?"}]
    again = post(v1, chat, **headers)
    assert again["X-Toolchat-Conversation-Id"] == str(conversation.pk)
    assert conversation.messages.filter(content__startswith="### Task").count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_task_while_the_chats_run_waits_is_no_409(v1, llm_server):
    llm_server.push(tool_calls_reply([("delete_notes", '{"note_ids": ["a", "b"]}', "call_d")]))
    first = post(v1, [{"role": "user", "content": "Delete notes a and b"}], **CHAT_ID)
    run = Run.objects.get(pk=first["X-Toolchat-Run-Id"])
    assert run.status == RunStatus.AWAITING_APPROVAL
    llm_server.push(text_reply('{"tags": ["notes"]}'))
    prompt = TITLE_PROMPT.replace("a concise, 3-5 word title", "1-3 broad tags")
    task = post(v1, [{"role": "user", "content": prompt}], **CHAT_ID)
    assert task.status_code == 200, task.json()
    assert Message.objects.filter(conversation=run.conversation).count() == 2  # user, call


@pytest.mark.django_db(transaction=True)
def test_open_webuis_rag_prompt_is_the_users_turn_not_a_task(v1, llm_server):
    llm_server.push(text_reply("From the file: 42."))
    rag = (
        "### Task:\nRespond to the user query using the provided context.\n"
        '<context>\n<source id="1">The answer is 42.</source>\n</context>\n'
        "<user_query>\nWhat is the answer?\n</user_query>"
    )
    response = post(v1, [{"role": "user", "content": rag}])
    conversation = Conversation.objects.get(pk=response["X-Toolchat-Conversation-Id"])
    assert conversation.source == Source.V1
    assert "tools" in llm_server.requests[-1]
