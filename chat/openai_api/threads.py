"""A stateless client's requests as stored conversations: its messages, their digests, the thread.

Chat Completions clients resend the whole history with every request. Each
request is mapped onto a stored conversation of the token's user:

- its messages are read into one normal form (`ClientMessage`): the text of
  string or text-part content, tool calls with their arguments as canonical
  JSON, no `name`, `developer` as `system`;
- a digest chain runs over them (`digests`): digest i covers messages 0..i-1,
  each step a SHA-256 of the previous digest and the message's normal form with
  its whitespace collapsed, so a client that re-wraps text or drops `name`
  still matches;
- after each answer, the conversation stores the digest of what its client
  saw (`client_digest`: the request's messages and the answer as sent), so the
  client's next request, which begins with exactly that, is found in one
  indexed query (`thread_find`), whatever the number of conversations;
- after a failed turn the client saw its request and no answer, so that is
  what is stored: the same request sent again matches it whole, and is a
  retry of that turn (`TurnFound.retry`), not a new conversation;
- an explicit name wins: an `X-OpenWebUI-Chat-Id` (or `X-Toolchat-Conversation`)
  header or `metadata.conversation_id` names the conversation, as a toolchat id
  or as the client's own (`client_ref`).

Anything else starts a new conversation, with the request's earlier messages
stored as its past (`ClientTurn.history`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from typing import Any

from django.db.models import Q

from chat.exceptions import InvalidInput
from chat.images import ImageInput, image_part, images_checked
from chat.models import Conversation, ExecutionStatus, ToolExecution
from chat.services.client_turns import ClientTurn
from tools.spec import TOOL_NAME_RE

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
# A text part's key, by its type (Chat Completions' and Responses' names alike).
TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal"}
REF_HEADERS = ("HTTP_X_OPENWEBUI_CHAT_ID", "HTTP_X_TOOLCHAT_CONVERSATION")
MAX_MESSAGES = 2000


@dataclasses.dataclass(frozen=True)
class ClientMessage:
    """One message of a request, in the normal form the digests and the store take."""

    role: str  # system, user, assistant or tool
    content: str | None
    tool_calls: tuple[tuple[str, str, str], ...] = ()  # (id, name, arguments)
    tool_call_id: str | None = None
    images: tuple[ImageInput, ...] = ()  # a user message's images, after its text

    def canonical(self) -> str:
        """What the digest covers: the fields that matter, whitespace collapsed.

        A message's images count by their bytes' hash (or URL), and only where
        there are some: the digests of messages without images are unchanged.
        """
        calls = [[i, n, _canonical_arguments(a)] for i, n, a in self.tool_calls]
        text = " ".join((self.content or "").split())
        fields: list[Any] = [self.role, text, calls, self.tool_call_id or ""]
        if self.images:
            fields.append([image.key() for image in self.images])
        return json.dumps(fields, ensure_ascii=False)

    def openai(self) -> dict[str, Any]:
        """The message in OpenAI shape, as the conversation stores it."""
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                for i, n, a in self.tool_calls
            ]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.images:
            data["images"] = list(self.images)  # stored as resources (chat/services/runs.py)
        return data


def messages_read(raw: Any) -> list[ClientMessage]:
    """A request's `messages`, checked and read; InvalidInput names the one at fault."""
    if not isinstance(raw, list) or not raw:
        raise InvalidInput("messages must be a non-empty array.", field="messages")
    if len(raw) > MAX_MESSAGES:
        raise InvalidInput(
            f"messages has {len(raw):,} items; at most {MAX_MESSAGES:,} are accepted.",
            field="messages",
        )
    return [_message_read(item, f"messages[{index}]") for index, item in enumerate(raw)]


def _message_read(item: Any, where: str) -> ClientMessage:
    if not isinstance(item, dict):
        raise InvalidInput(f"{where} must be an object.", field=where)
    role = item.get("role")
    if role == "tool":
        call_id = item.get("tool_call_id")
        if not _id_ok(call_id):
            raise InvalidInput(
                f"{where}.tool_call_id must be a string of 1 to 128 characters.",
                field=f"{where}.tool_call_id",
            )
        return ClientMessage("tool", _text(item.get("content"), where) or "", tool_call_id=call_id)
    if not isinstance(role, str) or role not in ROLES:
        raise InvalidInput(
            f"{where}.role must be system, developer, user, assistant or tool, not {_shown(role)}.",
            field=f"{where}.role",
        )
    if role == "user":
        content, images = content_read(item.get("content"), f"{where}.content", images_ok=True)
        return ClientMessage("user", content or "", images=images)
    content = _text(item.get("content"), where)
    calls = _calls_read(item.get("tool_calls"), where) if role == "assistant" else ()
    if content is None and not calls:
        content = ""
    return ClientMessage(ROLES[role], content, calls)


def _text(content: Any, where: str) -> str | None:
    """The text of a message's content: a string, or text (and refusal) parts joined."""
    return content_read(content, f"{where}.content", images_ok=False)[0]


def content_read(
    content: Any, where: str, *, images_ok: bool
) -> tuple[str | None, tuple[ImageInput, ...]]:
    """A message's content: its text (a string, or text and refusal parts joined) and images.

    Images (`image_url` and `input_image` parts, chat/images.py) only where
    `images_ok` (a user message's content); InvalidInput names the part at fault.
    """
    if content is None or isinstance(content, str):
        return content, ()
    if not isinstance(content, list):
        raise InvalidInput(f"{where} must be a string or an array of parts.", field=where)
    texts, images = [], []
    for index, part in enumerate(content):
        at = f"{where}[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        text_key = TEXT_PARTS.get(kind or "")
        if text_key is not None and isinstance(part.get(text_key), str):
            texts.append(part[text_key])
            continue
        image = image_part(part, at) if images_ok and isinstance(part, dict) else None
        if image is None:
            allowed = "text and image" if images_ok else "text"
            raise InvalidInput(
                f"{at}: only {allowed} parts are supported here, not {_shown(kind)}.", field=at
            )
        images.append(image)
    images_checked(images, where)
    return "".join(texts), tuple(images)


def _shown(value: Any) -> str:
    """A value named in an error: a string as written (cut short), anything else by its kind."""
    if isinstance(value, str):
        return repr(value[:40])
    kinds = {dict: "an object", list: "an array", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")


def _calls_read(calls: Any, where: str) -> tuple[tuple[str, str, str], ...]:
    if not calls:
        return ()
    if not isinstance(calls, list):
        raise InvalidInput(f"{where}.tool_calls must be an array.", field=f"{where}.tool_calls")
    read = []
    for index, call in enumerate(calls):
        at = f"{where}.tool_calls[{index}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise InvalidInput(f"{at}.function is required.", field=at)
        call_id, name = call.get("id"), function.get("name")
        arguments = function.get("arguments", "")
        if not _id_ok(call_id):
            raise InvalidInput(f"{at}.id must be a string of 1 to 128 characters.", field=at)
        if not isinstance(name, str) or not TOOL_NAME_RE.match(name):
            raise InvalidInput(f"{at}.function.name is not a valid tool name.", field=at)
        if not isinstance(arguments, str):
            raise InvalidInput(f"{at}.function.arguments must be a JSON string.", field=at)
        read.append((call_id, name, arguments))
    return tuple(read)


def _id_ok(call_id: Any) -> bool:
    """Whether a tool call id can be stored and sent back as it is (no NUL, no lone surrogate)."""
    if not isinstance(call_id, str) or not 0 < len(call_id) <= 128 or "\x00" in call_id:
        return False
    try:
        call_id.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _canonical_arguments(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return arguments.strip()


def digests(messages: list[ClientMessage]) -> list[str]:
    """The digest chain: item i is the digest of messages[:i] ("" for none)."""
    chain = [""]
    for message in messages:
        step = f"{chain[-1]}\n{message.canonical()}".encode("utf-8", "surrogatepass")
        chain.append(hashlib.sha256(step).hexdigest())
    return chain


def conversation_ref(meta: dict[str, Any], metadata: dict[str, Any] | None) -> str:
    """The conversation a request names explicitly ("" for none)."""
    for header in REF_HEADERS:
        value = meta.get(header)
        if value:
            return str(value).strip()[:200]
    value = (metadata or {}).get("conversation_id")
    return str(value).strip()[:200] if value else ""


def thread_find(user: Any, chain: list[str], ref: str) -> tuple[Conversation | None, int]:
    """The user's conversation the request continues, and how many of its messages it holds.

    With `ref`: that conversation (a toolchat id of the user's, or the client's
    own name for one), or None to make it. Without: the conversation whose
    client last saw the longest prefix of the request, in one query. It holds
    all of them when the request is one whose turn failed (`thread_failed`).
    """
    # Strict prefixes, and the whole request: what a client whose turn failed saw.
    known = {digest: index for index, digest in enumerate(chain[1:], start=1)}
    if ref:
        conversation = _by_ref(user, ref)
        if conversation is None:
            return None, 0
        return conversation, known.get(conversation.client_digest, -1)
    if not known:
        return None, 0
    found = (
        Conversation.objects.filter(owner=user, client_digest__in=list(known))
        .only("id", "client_digest", "mode", "model", "system_prompt", "owner_id")
        .order_by("-updated_at")
    )
    best = max(found, key=lambda c: known[c.client_digest], default=None)
    return (best, known[best.client_digest]) if best else (None, 0)


def _by_ref(user: Any, ref: str) -> Conversation | None:
    try:
        own_id: uuid.UUID | None = uuid.UUID(ref)
    except ValueError:
        own_id = None
    match = Q(client_ref=ref) | Q(pk=own_id) if own_id else Q(client_ref=ref)
    return Conversation.objects.filter(match, owner=user).first()


def turn_read(
    conversation: Conversation | None,
    messages: list[ClientMessage],
    held: int,
    *,
    tools: list[dict[str, Any]] | None,
    options: dict[str, Any],
) -> ClientTurn:
    """What the request adds to the conversation, from its first message not held there.

    `held` is how many of the request's messages the conversation holds; -1
    when a named conversation's history differs from the request's: then the
    messages after the request's last assistant message are the new ones.
    """
    if held < 0:
        last_assistant = max(
            (i for i, m in enumerate(messages) if m.role == "assistant"), default=-1
        )
        held = last_assistant + 1
    new = [m for m in messages[held:] if m.role != "system"]
    if not new:
        raise InvalidInput("The request adds no message to the conversation.", field="messages")
    last = new[-1]
    if last.role not in ("user", "tool"):
        raise InvalidInput(
            "The last message must be the user's or a tool's result, not the assistant's.",
            field=f"messages[{len(messages) - 1}]",
        )
    before = new[:-1] if last.role == "user" else new
    waiting = _client_calls_waiting(conversation)
    results = [
        (m.tool_call_id or "", m.content or "")
        for m in before
        if m.role == "tool" and m.tool_call_id in waiting
    ]
    history = [m for m in before if not (m.role == "tool" and m.tool_call_id in waiting)]
    return ClientTurn(
        history=_history_checked(history),
        results=results,
        content=last.content or "" if last.role == "user" else None,
        images=list(last.images) if last.role == "user" else [],
        tools=tools,
        options=options,
    )


def _client_calls_waiting(conversation: Conversation | None) -> set[str]:
    if conversation is None:
        return set()
    return set(
        ToolExecution.objects.filter(
            run__conversation=conversation, status=ExecutionStatus.CLIENT
        ).values_list("tool_call_id", flat=True)
    )


def _history_checked(history: list[ClientMessage]) -> list[dict[str, Any]]:
    """A client's past as the conversation stores it: each tool result after its call."""
    names: dict[str, str] = {}
    stored = []
    for message in history:
        data = message.openai()
        if message.role == "tool":
            name = names.get(message.tool_call_id or "")
            if name is None:
                raise InvalidInput(
                    f"The tool message for {message.tool_call_id!r} follows no call with that id.",
                    field="messages",
                )
            data["name"] = name
        for call_id, name, _ in message.tool_calls:
            names[call_id] = name
        stored.append(data)
    return stored


def system_prompt_read(messages: list[ClientMessage]) -> str:
    """The request's system (and developer) messages, as the conversation's system prompt."""
    return "\n\n".join(m.content or "" for m in messages if m.role == "system").strip()


def retry_of_failed(messages: list[ClientMessage], held: int) -> bool:
    """Whether the request is one whose turn failed, sent again: its conversation holds it all."""
    return held == len(messages) and messages[-1].role == "user"


def thread_failed(conversation: Conversation, messages: list[ClientMessage]) -> None:
    """Remember what the client of a failed turn saw: its request, and no answer.

    Only for a request that ends with a user message: that turn, sent again, is
    answered again (`retry_of_failed`).
    """
    if messages and messages[-1].role == "user":
        thread_saw(conversation, messages)


def thread_saw(conversation: Conversation, messages: list[ClientMessage]) -> None:
    """Remember what the client saw last (the request and the answer it was sent)."""
    Conversation.objects.filter(pk=conversation.pk).update(client_digest=digests(messages)[-1])
