"""A /v1 client's background tasks: told from its user's turns, answered apart from them.

Open WebUI asks its model, beside each chat, for a title, tags and follow-up
suggestions (and, when enabled, search queries or an image prompt). Each is a
request of its own, with one user message, the task prompt, that quotes the
chat: "### Task: ... <chat_history> ... </chat_history>" (its templates in
open_webui/config.py, `DEFAULT_*_PROMPT_TEMPLATE`). With its
`ENABLE_FORWARD_USER_INFO_HEADERS` the request also names the chat
(`X-OpenWebUI-Chat-Id`), as the chat's own turns do.

Such a request is not the user's turn, so toolchat answers it as what it is:
- in a conversation of its own (`Source.TASK`), never the chat's: the chat's
  history does not take the prompt, its title stays the user's words, and a
  task that runs beside the chat's turn is no 409 against it;
- by the model alone: none of toolchat's tools is offered (the run's
  `client_options.toolchat_tools` is false, chat/engine/request.py);
- left out of the conversation list (the sidebar, `GET /api/v1/conversations/`),
  and kept, as every turn is, in the audit and by id.

Open WebUI's RAG prompt also begins "### Task:" and is the user's turn: it
quotes no chat history, and so is not taken for a task.
"""

from __future__ import annotations

from chat.openai_api.threads import ClientMessage

TASK_PREFIX = "### Task:"
# What every task prompt quotes: the chat (title, tags, follow-ups, queries, image
# prompt), or the text being typed (autocompletion).
TASK_QUOTES = ("<chat_history>", "<text>")


def client_task(messages: list[ClientMessage]) -> str:
    """The task a request asks for, as its prompt names it ("" for a user's turn)."""
    said = [m for m in messages if m.role != "system"]
    if len(said) != 1 or said[0].role != "user":
        return ""
    text = (said[0].content or "").strip()
    if not text.startswith(TASK_PREFIX) or not any(quote in text for quote in TASK_QUOTES):
        return ""
    first = text[len(TASK_PREFIX) :].strip().splitlines()
    return (first[0].strip() if first else "") or "A client's background task"
