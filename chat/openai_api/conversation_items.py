"""A stored conversation as the Conversations API shows it: the resource, its items, items added.

`/v1/conversations` (chat/openai_api/conversations.py) is toolchat's own
conversations seen through OpenAI's Conversations API:

- a conversation's id is `conv_` and its toolchat id (a toolchat id alone is
  read too, so a conversation of the chat page may be continued); another
  user's is a 404, as a missing one is;
- its items are its messages, oldest first, as a response's items are
  (chat/openai_api/response_output.py): a user's message an `input_text`
  message, the assistant's text an `output_text` one, a call of toolchat's
  own tools an `mcp_call` (its result in `output`), a call of the client's a
  `function_call` and its result a `function_call_output`;
- items a client adds (at create, or `POST .../items`) are read as a
  response's input is (chat/openai_api/response_input.py) and stored as the
  conversation's past, with no run: messages of the user and the assistant,
  and the client's calls each with its result among the same items. System
  and developer messages are a response's `instructions`, not items.
"""

from __future__ import annotations

import uuid
from typing import Any

from chat.engine.request import client_tool_names
from chat.exceptions import ConversationNotFound, InvalidInput
from chat.models import Conversation, Message, Role, Run, ToolExecution
from chat.openai_api.response_input import output_read
from chat.openai_api.response_output import function_call_item, mcp_call_item, message_item

PREFIX = "conv_"
# OpenAI's bound on the items of one create or add request.
MAX_ITEMS = 20


def v1_id(conversation: Conversation) -> str:
    """`conv_` and the conversation's toolchat id."""
    return f"{PREFIX}{conversation.pk.hex}"


def conversation_of(user: Any, value: Any, *, field: str | None = None) -> Conversation:
    """The user's conversation with this id (`conv_...`, or a toolchat id); else a 404."""
    conversation_pk: uuid.UUID | None = None
    if isinstance(value, str):
        try:
            conversation_pk = uuid.UUID(value.removeprefix(PREFIX))
        except ValueError:
            conversation_pk = None
    found = (
        Conversation.objects.filter(pk=conversation_pk, owner=user, replay_of__isnull=True).first()
        if conversation_pk is not None
        else None
    )
    if found is None:
        shown = value[:80] if isinstance(value, str) else value
        raise ConversationNotFound(f"No conversation with id {shown!r} was found.", field=field)
    return found


def conversation_resource(conversation: Conversation) -> dict[str, Any]:
    """The `conversation` object."""
    return {
        "id": v1_id(conversation),
        "object": "conversation",
        "created_at": int(conversation.created_at.timestamp()),
        "metadata": conversation.client_metadata or {},
    }


def conversation_items(conversation: Conversation) -> list[dict[str, Any]]:
    """The conversation's messages as items, oldest first (superseded ones left out)."""
    messages = Message.objects.filter(
        conversation=conversation, superseded_at__isnull=True
    ).order_by("position")
    executions = {
        e.tool_call_id: e
        for e in ToolExecution.objects.filter(run__conversation=conversation).select_related(
            "run", "standing_approval"
        )
    }
    clients: dict[Any, frozenset[str]] = {}

    def is_clients(execution: ToolExecution) -> bool:
        run: Run = execution.run
        if run.pk not in clients:
            clients[run.pk] = client_tool_names(run)
        return execution.name in clients[run.pk]

    server_calls: set[str] = set()
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role in (Role.USER, Role.SYSTEM):
            items.append(_input_message(message))
        elif message.role == Role.ASSISTANT:
            if message.content:
                items.append(message_item(message))
            for index, call in enumerate(message.tool_calls or []):
                execution = executions.get(call.get("id"))
                if execution is None:
                    items.append(_past_call(message, index, call))
                elif is_clients(execution):
                    items.append(function_call_item(execution, call))
                else:
                    server_calls.add(execution.tool_call_id)
                    items.append(mcp_call_item(execution, call))
        elif message.tool_call_id not in server_calls:
            items.append(_call_output(message))
    return items


def conversation_item(conversation: Conversation, item_id: str) -> dict[str, Any]:
    """One item of the conversation, by its id; else a 404."""
    for item in conversation_items(conversation):
        if item["id"] == item_id:
            return item
    raise ConversationNotFound(
        f"No item {item_id[:80]!r} in conversation {v1_id(conversation)}.",
        field="item_id",
    )


def items_of_messages(conversation: Conversation, messages: list[Message]) -> list[dict[str, Any]]:
    """The conversation's items that these messages of it make (each item names its message)."""
    ids = {message.pk.hex for message in messages}
    return [item for item in conversation_items(conversation) if _message_hex(item) in ids]


def _message_hex(item: dict[str, Any]) -> str:
    """The message an item of a client's past comes from: `msg_<hex>`, `fc_<hex>_<n>`, `fco_<hex>`."""
    parts = str(item["id"]).split("_")
    return parts[1] if len(parts) > 1 else ""


def _input_message(message: Message) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{message.pk.hex}",
        "status": "completed",
        "role": message.role,
        "content": [{"type": "input_text", "text": message.content or ""}],
    }


def _past_call(message: Message, index: int, call: dict[str, Any]) -> dict[str, Any]:
    """A call of a past the client gave (no run of toolchat's made it)."""
    return {
        "type": "function_call",
        "id": f"fc_{message.pk.hex}_{index}",
        "call_id": call.get("id"),
        "name": call["function"].get("name"),
        "arguments": call["function"].get("arguments") or "",
        "status": "completed",
    }


def _call_output(message: Message) -> dict[str, Any]:
    return {
        "type": "function_call_output",
        "id": f"fco_{message.pk.hex}",
        "call_id": message.tool_call_id,
        "output": message.content or "",
        "status": "completed",
    }


def items_as_history(raw: Any, field: str = "items") -> list[dict[str, Any]]:
    """Items a client adds, as the messages the conversation stores; InvalidInput names a bad one.

    Each of the client's calls needs its result among the same items: the
    conversation's history is always one a model accepts.
    """
    if not isinstance(raw, list) or not raw:
        raise InvalidInput(f"{field} must be a non-empty array of items.", field=field)
    if len(raw) > MAX_ITEMS:
        raise InvalidInput(
            f"{field} has {len(raw)} items; at most {MAX_ITEMS} are added at once.", field=field
        )
    messages = output_read(raw, field)
    if not messages:
        raise InvalidInput(f"{field} holds no message nor function call.", field=field)
    names: dict[str, str] = {}
    answered: set[str] = set()
    history = []
    for message in messages:
        if message.role == "system":
            raise InvalidInput(
                f"{field}: system and developer messages are not kept as items; send them "
                "as the instructions of each response.",
                field=field,
            )
        data = message.openai()
        if message.role == "tool":
            name = names.get(message.tool_call_id or "")
            if name is None:
                raise InvalidInput(
                    f"{field}: the function_call_output for {message.tool_call_id!r} follows "
                    "no function_call among these items.",
                    field=field,
                )
            data["name"] = name
            answered.add(message.tool_call_id or "")
        for call_id, name, _ in message.tool_calls:
            names[call_id] = name
        history.append(data)
    missing = sorted(set(names) - answered)
    if missing:
        raise InvalidInput(
            f"{field}: every function_call needs its function_call_output among the same "
            f"items; none was sent for {', '.join(missing)}.",
            field=field,
        )
    return history
