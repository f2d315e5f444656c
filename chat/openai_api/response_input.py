"""A /v1/responses request read: its fields checked, its input items as the messages' normal form.

A Responses request says what a Chat Completions request says in other
words, so it is read into the same `CompletionRequest` (and checked by the
same `request_read`: the model, the options, the client's tools) and the same
`ClientMessage`s (chat/openai_api/threads.py), and from there it is the same
turn (chat/openai_api/turns.py). Input items map onto messages:

- a string, or a `message` item, is a message of its role (`developer` is
  `system`); its content a string or text parts (`input_text`,
  `output_text`, `refusal`), and a user's its `input_image` parts
  (chat/images.py);
- `instructions` is a system message before the input;
- a `function_call` item is a call of the assistant message before it (or of
  an assistant message of its own); a `function_call_output` item is the
  `tool` message that answers it;
- `mcp_call`, `mcp_approval_request` and `reasoning` items are ones toolchat
  gave out (its own tools' calls, which it holds) and are skipped;
- `mcp_approval_response` items decide the calls that wait
  (chat/openai_api/response_approvals.py): with `previous_response_id` they
  come alone; in a stateless history, those that end it decide, and those
  before its last message are history, skipped.

Field names in errors are the Responses API's own (`tools[0].name`,
`max_output_tokens`, `input[2].content`).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from chat.exceptions import InvalidInput
from chat.openai_api.answers import CompletionRequest, request_read
from chat.openai_api.options import depth_check
from chat.openai_api.response_approvals import Decision, decision_read
from chat.openai_api.response_options import (
    echo_read,
    mcp_declaration_check,
    options_as_completion,
)
from chat.openai_api.response_output import SERVER_LABEL
from chat.openai_api.threads import MAX_MESSAGES, ClientMessage, messages_read

# Items a client sends back that toolchat gave out and holds itself.
SKIPPED_ITEMS = frozenset({"mcp_call", "mcp_list_tools", "mcp_approval_request", "reasoning"})
APPROVAL_RESPONSE = "mcp_approval_response"
TEXT_PARTS = {"input_text": "text", "output_text": "text", "text": "text", "refusal": "refusal"}


@dataclasses.dataclass(frozen=True)
class ResponseRequest:
    """A /v1/responses body, checked: the turn it asks for and what its response echoes."""

    completion: CompletionRequest
    messages: list[ClientMessage]
    echo: dict[str, Any]  # the request fields the response shows (and Run.response keeps)
    previous_response_id: str | None
    store: bool
    # The request's `mcp_approval_response` items: it decides calls instead of adding a turn.
    decisions: list[Decision] = dataclasses.field(default_factory=list)
    raw_input: Any = None  # `input` as given, for GET .../input_items
    conversation: str | None = None  # the id of the conversation it is the next turn of

    @property
    def background(self) -> bool:
        return bool(self.echo.get("background"))


def response_request_read(body: Any, meta: dict[str, Any]) -> ResponseRequest:
    """Check a /v1/responses body; InvalidInput names the field at fault, as the API names it."""
    if not isinstance(body, dict):
        raise InvalidInput("The body must be a JSON object.")
    conversation = _conversation_read(body.get("conversation"))
    instructions = _optional(body, "instructions", str, "a string")
    previous = _optional(body, "previous_response_id", str, "a string")
    store = _optional(body, "store", bool, "a boolean")
    background = _optional(body, "background", bool, "a boolean")
    if background and store is False:
        raise InvalidInput(
            "A background response is stored: background needs store.", field="store"
        )
    if background and body.get("stream"):
        raise InvalidInput(
            "background with stream is not supported; poll GET /v1/responses/{id}.",
            field="stream",
        )
    try:
        completion = request_read(_as_completion(body), meta)
    except InvalidInput as error:
        field = _field_named(error.field)
        message = error.message.replace(str(error.field), str(field)) if field else error.message
        raise InvalidInput(message, field=field) from None
    raw = body.get("input")
    if conversation is not None and previous is not None:
        raise InvalidInput(
            "conversation and previous_response_id are two ways to name the turn before; "
            "send one of them.",
            field="conversation",
        )
    decisions = _decisions_read(raw, previous)
    # A stateless history that ends with answers is read too: what its client saw.
    stateless = not decisions or previous is None
    messages = (
        _instructions(instructions) + items_read(raw, answers=bool(decisions)) if stateless else []
    )
    # What the response keeps as it was sent (its echo, the input items): a tool's
    # parameters and an item's content are counted from themselves.
    depth_check(body, envelopes={"tools": 2, "input": 2})
    if decisions and previous is not None:
        return ResponseRequest(
            completion, [], echo_read(body), previous, store is not False, decisions, raw
        )
    echo = echo_read(body)
    return ResponseRequest(
        completion, messages, echo, previous, store is not False, decisions, raw, conversation
    )


def _conversation_read(value: Any) -> str | None:
    """`conversation`: a conversation's id, as a string or as `{"id": ...}`."""
    if value is None:
        return None
    if isinstance(value, dict):
        value = value.get("id")
    if not isinstance(value, str) or not value:
        raise InvalidInput(
            'conversation must be a conversation\'s id, or {"id": ...}.', field="conversation"
        )
    return value


def _decisions_read(raw: Any, previous: str | None) -> list[Decision]:
    """The approval responses of a request that decides calls.

    With `previous_response_id`, the request carries only them. Without it, a
    stateless history ends with them: the answers after its last message (or
    function call, or output) are the ones it sends now, to be decided
    (chat/openai_api/response_approvals.py `decisions_of_history`); those
    before are history it resends, and are skipped.
    """
    if not isinstance(raw, list):
        return []
    items = [(f"input[{i}]", item) for i, item in enumerate(raw) if isinstance(item, dict)]
    answers = [(where, item) for where, item in items if item.get("type") == APPROVAL_RESPONSE]
    if not answers:
        return []
    others = [
        index
        for index, (_, item) in enumerate(items)
        if not isinstance(item.get("type"), str)
        or item["type"] not in SKIPPED_ITEMS | {APPROVAL_RESPONSE}
    ]
    if previous is None:
        after = max(others, default=-1)
        trailing = [
            (w, item) for w, item in items[after + 1 :] if item["type"] == APPROVAL_RESPONSE
        ]
        return [decision_read(item, where) for where, item in trailing]
    if others:
        where = items[others[0]][0]
        raise InvalidInput(
            f"{where}: a request that answers approval requests carries only "
            "mcp_approval_response items; send the next message once the turn has gone on.",
            field=where,
        )
    return [decision_read(item, where) for where, item in answers]


def _optional(body: dict[str, Any], key: str, kind: type, name: str) -> Any:
    value = body.get(key)
    if value is not None and not isinstance(value, kind):
        raise InvalidInput(f"{key} must be {name}.", field=key)
    return value


def _as_completion(body: dict[str, Any]) -> dict[str, Any]:
    """The Chat Completions body that asks for the same turn (its messages aside)."""
    chat = options_as_completion(body, body["tools"] if isinstance(body.get("tools"), list) else [])
    if body.get("tools"):
        functions = _tools_as_functions(body["tools"])
        if functions != []:  # toolchat's MCP tool alone declares no function
            chat["tools"] = functions
    return chat


def _tools_as_functions(tools: Any) -> Any:
    """Responses' flat function tools in Chat Completions' shape; any other kind is refused.

    An MCP tool of the server `toolchat` declares toolchat's own tools, which run
    on the server whether declared or not: it is echoed, not sent to the model as
    a function (an agents SDK user declares it to handle toolchat's approvals).
    """
    if not isinstance(tools, list):
        return tools  # request_read says what is wrong with it
    shaped = []
    for index, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "mcp":
            mcp_declaration_check(tool, f"tools[{index}]")
            continue
        if kind != "function":
            raise InvalidInput(
                f"tools[{index}].type: only function tools and toolchat's own MCP tool "
                f'({{"type": "mcp", "server_label": "{SERVER_LABEL}"}}) are supported, not '
                f"{kind!r}; toolchat's own tools run on the server without being declared.",
                field=f"tools[{index}].type",
            )
        function = {key: value for key, value in tool.items() if key != "type"}
        shaped.append({"type": "function", "function": function})
    return shaped


def _field_named(field: str | None) -> str | None:
    """A Chat Completions field's name as the Responses API calls it."""
    if field is None:
        return None
    field = re.sub(r"^tools\[(\d+)\]\.function", r"tools[\1]", field)
    return {"max_tokens": "max_output_tokens", "messages": "input"}.get(field, field)


def _instructions(instructions: str | None) -> list[ClientMessage]:
    return [ClientMessage("system", instructions)] if instructions else []


def items_read(raw: Any, *, answers: bool = False) -> list[ClientMessage]:
    """`input` (a string, or items) as messages; InvalidInput names the item at fault.

    An input that ends with approval responses (`answers`) may hold nothing else.
    """
    if isinstance(raw, str):
        return [ClientMessage("user", raw)]
    if not isinstance(raw, list) or not raw:
        raise InvalidInput("input must be a string or a non-empty array of items.", field="input")
    if len(raw) > MAX_MESSAGES:
        raise InvalidInput(
            f"input has {len(raw):,} items; at most {MAX_MESSAGES:,} are accepted.", field="input"
        )
    messages = output_read(raw, "input")
    if not messages and not answers:
        raise InvalidInput("input holds no message nor function_call_output.", field="input")
    return messages


def output_read(items: list[Any], where: str = "output") -> list[ClientMessage]:
    """Items as messages (none, for items that are all toolchat's own calls)."""
    messages: list[ClientMessage] = []
    for index, item in enumerate(items):
        _item_add(messages, item, f"{where}[{index}]")
    return messages


def output_seen(items: list[dict[str, Any]]) -> list[ClientMessage]:
    """What a client was shown by a response's output, for the digest of its conversation.

    Its messages and calls as `output_read` reads them, and each approval request as
    a call the client was shown: a response that paused for approvals was answered,
    so the same input sent again is a request of its own, not a retry of a failed
    turn (chat/openai_api/threads.py `retry_of_failed`). A stateless history that
    resends the requests reads without them (they are skipped), and so starts a
    conversation of its own too: a paused response is continued with
    `previous_response_id`.
    """
    seen = output_read([item for item in items if item.get("type") != "mcp_approval_request"])
    asked = tuple(
        (str(item["id"]), str(item["name"]), str(item["arguments"]))
        for item in items
        if item.get("type") == "mcp_approval_request"
    )
    if asked:
        seen.append(ClientMessage(role="assistant", content=None, tool_calls=asked))
    return seen


def _item_add(messages: list[ClientMessage], item: Any, where: str) -> None:
    if not isinstance(item, dict):
        raise InvalidInput(f"{where} must be an object.", field=where)
    kind = item.get("type") or ("message" if "role" in item else None)
    if not isinstance(kind, str):
        raise InvalidInput(f"{where}.type must be a string.", field=f"{where}.type")
    if kind in SKIPPED_ITEMS or kind == APPROVAL_RESPONSE:
        return
    if kind == "message":
        messages.append(_message(item, where))
    elif kind == "function_call":
        _call_add(messages, item, where)
    elif kind == "function_call_output":
        output = item.get("output")
        content = _text(output, f"{where}.output") if isinstance(output, list) else output
        message = {"role": "tool", "tool_call_id": item.get("call_id"), "content": content}
        messages.append(_checked(message, where, "call_id"))
    else:
        raise InvalidInput(
            f"{where}.type: {kind!r} items are not supported; send message, function_call "
            "and function_call_output items.",
            field=f"{where}.type",
        )


def _message(item: dict[str, Any], where: str) -> ClientMessage:
    """A message item, read as a Chat Completions message is (a user's may hold images)."""
    return _checked({"role": item.get("role"), "content": item.get("content")}, where, "role")


def _text(parts: list[Any], where: str) -> str:
    """Text parts joined; any other part (an image, a file) is refused, naming it."""
    texts = []
    for index, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        key = TEXT_PARTS.get(kind or "")
        if key is None or not isinstance(part.get(key), str):
            raise InvalidInput(
                f"{where}[{index}]: only text parts are supported, not {kind!r}.",
                field=f"{where}[{index}]",
            )
        texts.append(part[key])
    return "".join(texts)


def _call_add(messages: list[ClientMessage], item: dict[str, Any], where: str) -> None:
    """A function call, joined to the assistant message it follows (or one of its own)."""
    call = {"id": item.get("call_id"), "function": {k: item.get(k) for k in ("name", "arguments")}}
    message = _checked({"role": "assistant", "content": None, "tool_calls": [call]}, where, "")
    last = messages[-1] if messages else None
    if last is not None and last.role == "assistant":
        calls = last.tool_calls + message.tool_calls
        messages[-1] = dataclasses.replace(last, tool_calls=calls)
    else:
        messages.append(message)


def _checked(message: dict[str, Any], where: str, key: str) -> ClientMessage:
    """One message read as Chat Completions reads it, its errors naming the item."""
    try:
        (read,) = messages_read([message])
    except InvalidInput as error:
        field = f"{where}.{key}" if key else where
        if error.field and error.field.startswith("messages[0].content"):
            field = error.field.replace("messages[0]", where)
        text = error.message.replace("messages[0].tool_calls[0].", "").replace("messages[0]", where)
        raise InvalidInput(text, field=field, details=error.details or None) from None
    return read
