"""The OpenAI Chat Completions codec, and the guards that keep a history valid.

Stored rows (chat.models.Message) become the exact message dicts of the OpenAI
Chat Completions API, and OpenAI message dicts become rows. Whatever is stored,
the history handed to a model obeys the API's pairing rule (DESIGN.md section
3): every assistant `tool_calls` entry is answered by exactly one `tool`
message with the same `tool_call_id`, right after the assistant message and
before any other role; trimming old history never splits a call from its
answers.

The guards are pure functions over OpenAI dicts, so that every provider and
every continuation policy gets them for free and the tests can exercise them
without a database.

The openai package's TypedDicts are the reference for what a valid message
is. They are loaded lazily: importing the SDK costs about a second, and the
hot path (building the history for a model call) never needs it.
"""

from __future__ import annotations

import bisect
import functools
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from pydantic import ValidationError

from chat.exceptions import InvalidHistory
from chat.models import Conversation, Message, Role

if TYPE_CHECKING:
    from pydantic import TypeAdapter

logger = logging.getLogger(__name__)

OpenAIMessage = dict[str, Any]
"""One message in the shape of openai.types.chat.ChatCompletionMessageParam."""

INTERRUPTED_TOOL_RESULT: Final[Mapping[str, Any]] = {
    "success": False,
    "error": "This tool call did not complete (interrupted).",
    "status": "interrupted",
}
"""The result the model sees for a call whose answer was never stored."""

INTERRUPTED_TOOL_CONTENT: Final = json.dumps(INTERRUPTED_TOOL_RESULT)

# Builds the error for one message of an import, given the text after its label.
_Fail = Callable[[str], InvalidHistory]

# The roles toolchat stores. OpenAI also knows `developer` and the deprecated
# `function`; an import refuses them instead of silently rewriting them.
STORED_ROLES: Final = frozenset(Role.values)
# Leading messages of these roles are instructions: trimming always keeps them.
INSTRUCTION_ROLES: Final = frozenset({"system", "developer"})

# Column limits of chat.models.Message, checked before the database sees them
# (SQLite does not enforce a varchar length, PostgreSQL does).
NAME_MAX_LENGTH: Final = 64
TOOL_CALL_ID_MAX_LENGTH: Final = 128


# --- Rows to OpenAI -------------------------------------------------------------------


def message_to_openai(message: Message) -> OpenAIMessage:
    """One stored row as the exact OpenAI Chat Completions message dict."""
    role = message.role
    if role == Role.TOOL:
        # ChatCompletionToolMessageParam has no `name`: it stays in our row.
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id or "",
            "content": message.content or "",
        }
    if role == Role.ASSISTANT:
        calls = [tool_call_to_openai(call) for call in message.tool_calls or []]
        data: OpenAIMessage = {"role": "assistant", "content": message.content}
        if calls:
            data["tool_calls"] = calls
        elif message.content is None:
            # Content may be missing only where tool_calls say what the message is.
            data["content"] = ""
        return data
    if role in (Role.SYSTEM, Role.USER):
        return {"role": str(role), "content": message.content or ""}
    raise ValueError(f"message {message.pk} has the unknown role {role!r}")


def message_to_api(message: Message) -> dict[str, Any]:
    """One stored row as the REST API and the export show it: OpenAI fields plus ours."""
    usage = None
    if message.prompt_tokens is not None or message.completion_tokens is not None:
        usage = {
            "prompt_tokens": message.prompt_tokens,
            "completion_tokens": message.completion_tokens,
        }
    data: dict[str, Any] = {"id": str(message.id), **message_to_openai(message)}
    if message.role == Role.TOOL:
        data["name"] = message.name
    data.update(
        {
            "position": message.position,
            "created_at": message.created_at.isoformat() if message.created_at else None,
            "run_id": str(message.run_id) if message.run_id else None,
            "resource_id": str(message.resource_id) if message.resource_id else None,
            "latency_ms": message.latency_ms,
            "model": message.model or None,
            "usage": usage,
            "finish_reason": message.finish_reason or None,
        }
    )
    return data


def tool_call_to_openai(call: Mapping[str, Any]) -> dict[str, Any]:
    """One stored `tool_calls` entry with only the keys the OpenAI API accepts."""
    call_id = str(call.get("id") or "")
    if call.get("type") == "custom":
        custom = call.get("custom") or {}
        return {
            "id": call_id,
            "type": "custom",
            "custom": {"name": str(custom.get("name", "")), "input": str(custom.get("input", ""))},
        }
    function = call.get("function") or {}
    arguments = function.get("arguments", "")
    if not isinstance(arguments, str):
        # A caller stored parsed arguments: the API wants the JSON text.
        arguments = json.dumps(arguments)
    # Streaming deltas carry an `index`; the request must not.
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": str(function.get("name", "")), "arguments": arguments},
    }


def build_model_history(
    messages: Iterable[Message],
    *,
    system_prompt: str = "",
    max_messages: int | None = None,
    max_chars: int | None = None,
) -> list[OpenAIMessage]:
    """Rows as the message list for a model call: prompt first, repaired, trimmed."""
    history: list[OpenAIMessage] = []
    if system_prompt:
        history.append({"role": "system", "content": system_prompt})
    history.extend(message_to_openai(message) for message in messages)
    return trim(repair(history), max_messages=max_messages, max_chars=max_chars)


# --- Guards ---------------------------------------------------------------------------


def repair(messages: Sequence[Mapping[str, Any]]) -> list[OpenAIMessage]:
    """Make a history obey the pairing rule: fill missing answers, drop strays, regroup."""
    history = [_normalized(message) for message in messages]

    # Which assistant messages call each id, in order. The answer to a call
    # must come after it and before the next message that calls the same id
    # again, so that reused ids (some providers number calls per response)
    # still pair with the right call.
    callers: dict[str, list[int]] = {}
    for index, message in enumerate(history):
        for call_id in _call_ids(message):
            callers.setdefault(call_id, []).append(index)
    answers_by_id: dict[str, list[int]] = {}
    for index, message in enumerate(history):
        if message.get("role") == "tool":
            answers_by_id.setdefault(str(message.get("tool_call_id")), []).append(index)

    claimed: dict[int, list[int]] = {}
    claimed_indexes: set[int] = set()
    for call_id, caller_indexes in callers.items():
        answers = answers_by_id.get(call_id, [])
        for nth, caller in enumerate(caller_indexes):
            window_end = caller_indexes[nth + 1] if nth + 1 < len(caller_indexes) else len(history)
            first = bisect.bisect_right(answers, caller)
            if first < len(answers) and answers[first] < window_end:
                claimed.setdefault(caller, []).append(answers[first])
                claimed_indexes.add(answers[first])

    repaired: list[OpenAIMessage] = []
    for index, message in enumerate(history):
        if message.get("role") == "tool":
            if index not in claimed_indexes:
                call_id = str(message.get("tool_call_id"))
                earlier = [c for c in callers.get(call_id, []) if c < index]
                reason = "its call was already answered" if earlier else "no earlier call has it"
                logger.warning("Dropped tool message for tool_call_id %s: %s.", call_id, reason)
            continue
        repaired.append(message)
        call_ids = _call_ids(message)
        if not call_ids:
            continue
        # Answers keep their stored order (the order the tools finished in), so
        # that a valid history passes through unchanged.
        answer_indexes = sorted(claimed.get(index, []))
        repaired.extend(history[answer] for answer in answer_indexes)
        answered = {history[answer].get("tool_call_id") for answer in answer_indexes}
        for call_id in call_ids:
            if call_id not in answered:
                logger.info("Filled the missing answer to tool_call_id %s (interrupted).", call_id)
                repaired.append(
                    {"role": "tool", "tool_call_id": call_id, "content": INTERRUPTED_TOOL_CONTENT}
                )
    return repaired


def trim(
    messages: Sequence[OpenAIMessage],
    *,
    max_messages: int | None = None,
    max_chars: int | None = None,
) -> list[OpenAIMessage]:
    """Drop the oldest turns until the budgets hold, keeping instructions and the newest turn.

    Expects a repaired history (see `repair`). Leading system messages are
    always kept. The rest is cut only where a user message starts a turn, so
    an assistant message never loses its tool answers and the kept part opens
    with the user's words (some chat templates insist on it). The turn of the
    newest user message is kept even when it alone is over budget. Both
    budgets count the whole result, instructions included; characters are
    those of the content and of the tool call arguments.
    """
    if max_messages is not None and max_messages < 1:
        raise ValueError("max_messages must be at least 1")
    if max_chars is not None and max_chars < 0:
        raise ValueError("max_chars must not be negative")
    history = list(messages)
    if max_messages is None and max_chars is None:
        return history

    head_length = 0
    while head_length < len(history) and history[head_length].get("role") in INSTRUCTION_ROLES:
        head_length += 1
    head, body = history[:head_length], history[head_length:]
    if not body:
        return history

    turn_starts = [i for i, message in enumerate(body) if message.get("role") == "user"]
    if not turn_starts:
        # No user message at all: fall back to cutting between units (an
        # assistant message with its tool answers, or any other message).
        turn_starts = [i for i, message in enumerate(body) if message.get("role") != "tool"]
    keep_from = turn_starts[-1] if turn_starts else 0

    suffix_chars = [0] * (len(body) + 1)
    for i in range(len(body) - 1, -1, -1):
        suffix_chars[i] = suffix_chars[i + 1] + message_chars(body[i])
    head_chars = sum(message_chars(message) for message in head)

    # The earliest cut that fits keeps the most; a cut at 0 keeps everything.
    for cut in sorted({0, *turn_starts}):
        if cut >= keep_from:
            break
        fits_count = max_messages is None or head_length + len(body) - cut <= max_messages
        fits_chars = max_chars is None or head_chars + suffix_chars[cut] <= max_chars
        if fits_count and fits_chars:
            return head + body[cut:]
    return head + body[keep_from:]


def message_chars(message: Mapping[str, Any]) -> int:
    """The size of a message for trimming: its text plus its tool call arguments."""
    content = message.get("content")
    if isinstance(content, str):
        size = len(content)
    elif content is None:
        size = 0
    else:
        size = sum(
            len(str(part.get("text") or part.get("refusal") or ""))
            for part in content
            if isinstance(part, Mapping)
        )
    for call in message.get("tool_calls") or []:
        if call.get("type") == "custom":
            size += len(str((call.get("custom") or {}).get("input", "")))
        else:
            size += len(str((call.get("function") or {}).get("arguments", "")))
    return size


def open_tool_calls(messages: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The calls of a history that no tool message has answered yet: {tool_call_id: name}."""
    pending: dict[str, str] = {}
    for message in messages:
        if message.get("role") == "tool":
            pending.pop(str(message.get("tool_call_id")), None)
            continue
        for call in message.get("tool_calls") or []:
            pending[str(call.get("id"))] = _call_name(call)
    return pending


def _normalized(message: Mapping[str, Any]) -> OpenAIMessage:
    """A shallow copy with assistant tool_calls as a list of distinct ids, or no key at all."""
    data = dict(message)
    if data.get("role") != "assistant":
        return data
    if "tool_calls" in data:
        calls: list[Any] = []
        seen: set[str] = set()
        for call in data.get("tool_calls") or []:
            call_id = str(call.get("id"))
            if call_id in seen:
                # Two calls with one id cannot both be answered: keep the first.
                logger.warning("Dropped a repeated tool call %s in one assistant message.", call_id)
                continue
            seen.add(call_id)
            calls.append(call)
        if calls:
            data["tool_calls"] = calls
        else:
            del data["tool_calls"]
    if "tool_calls" not in data and data.get("content") is None:
        data["content"] = ""
    return data


def _call_ids(message: Mapping[str, Any]) -> list[str]:
    if message.get("role") != "assistant":
        return []
    return [str(call.get("id")) for call in message.get("tool_calls") or []]


def _call_name(call: Mapping[str, Any]) -> str:
    kind = "custom" if call.get("type") == "custom" else "function"
    return str((call.get(kind) or {}).get("name") or "")


# --- Validation -----------------------------------------------------------------------


@functools.cache
def message_list_adapter(*, strict: bool = False) -> TypeAdapter[list[Any]]:
    """The pydantic TypeAdapter of a list of openai ChatCompletionMessageParam.

    Strict forbids keys the TypedDicts do not declare (what a model request
    must satisfy); otherwise they are ignored, as the SDK itself does. The
    union is discriminated by role so that errors name the right message type.
    The adapter is cached and must stay alive: pydantic validates `Iterable`
    fields lazily, through the adapter.
    """
    from typing import Annotated

    from openai.types.chat import ChatCompletionMessageParam
    from pydantic import ConfigDict, Field, TypeAdapter

    item = Annotated[ChatCompletionMessageParam, Field(discriminator="role")]
    config = ConfigDict(extra="forbid") if strict else None
    return TypeAdapter(list[item], config=config)


def validate_messages(messages: object, *, strict: bool = False) -> list[OpenAIMessage]:
    """Validate OpenAI message dicts, nested lists included; raise InvalidHistory naming the index.

    Returns the validated copies, with every lazily validated iterable made a
    list. Without `strict`, undeclared keys are dropped from the copies.
    """
    if not isinstance(messages, list):
        raise InvalidHistory("messages must be a list of message objects.", field="messages")
    try:
        validated: list[OpenAIMessage] = message_list_adapter(strict=strict).validate_python(
            messages
        )
    except ValidationError as error:
        errors = error.errors()
        index = errors[0]["loc"][0] if errors and errors[0]["loc"] else None
        if not isinstance(index, int):
            raise InvalidHistory(f"messages: {_describe(errors)}", field="messages") from None
        same = [e for e in errors if e["loc"] and e["loc"][0] == index]
        role = messages[index].get("role") if isinstance(messages[index], Mapping) else None
        tail = [list(e["loc"][1:]) for e in same]
        for loc in tail:
            # A discriminated union puts the tag (the role) first: it says nothing new.
            if loc and loc[0] == role:
                loc.pop(0)
        relative = [{**e, "loc": tuple(loc)} for e, loc in zip(same, tail, strict=True)]
        raise _invalid(index, role, _describe(relative)) from None

    for index, message in enumerate(validated):
        for key, value in list(message.items()):
            if value is None or isinstance(value, str | int | float | bool | dict | list):
                continue
            try:
                message[key] = list(value)
            except ValidationError as error:
                described = _describe([{**e, "loc": (key, *e["loc"])} for e in error.errors()])
                raise _invalid(index, message.get("role"), described) from None
    return validated


def _invalid(index: int, role: object, text: str) -> InvalidHistory:
    label = f"Message {index}" + (f" ({role})" if isinstance(role, str) else "")
    return InvalidHistory(f"{label}: {text}", index=index, field="messages")


def _describe(errors: Sequence[Mapping[str, Any]]) -> str:
    """Pydantic errors as one readable line, without the noise of union members."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for error in errors:
        member = next((s for s in error["loc"] if isinstance(s, str) and _is_label(s)), "")
        groups.setdefault(member, []).append(error)
    # A union member whose own `type` tag did not match is not what the caller
    # meant; its complaints would only mislead.
    plausible = [
        group
        for group in groups.values()
        if not any(e["type"] == "literal_error" and e["loc"][-1:] == ("type",) for e in group)
    ] or list(groups.values())
    texts: list[str] = []
    for error in plausible[0][:3]:
        path = _path(error["loc"])
        texts.append(f"{path}: {error['msg']}" if path else str(error["msg"]))
    return "; ".join(dict.fromkeys(texts))


def _is_label(segment: str) -> bool:
    """Whether a loc segment names a union member (a type) rather than a key."""
    return segment[:1].isupper() or "[" in segment or segment in {"str", "none", "list"}


def _path(loc: Sequence[int | str]) -> str:
    path = ""
    for segment in loc:
        if isinstance(segment, int):
            path += f"[{segment}]"
        elif not _is_label(segment):
            path += f".{segment}" if path else segment
    return path


# --- OpenAI to rows (import) ----------------------------------------------------------


def openai_to_rows(
    messages: object,
    *,
    conversation: Conversation,
    start_position: int = 0,
    open_calls: Mapping[str, str] | None = None,
) -> list[Message]:
    """OpenAI message dicts as unsaved Message rows; raise InvalidHistory naming the bad index.

    Text content-part lists are joined with newlines; other parts (images,
    audio, files, refusals) are refused. Tool messages may carry our extension
    keys `name` (default: the name in the call they answer) and `resource_id`.
    Each tool message must answer a call that is still open at that point: one
    made earlier in `messages`, or one of `open_calls` (calls already stored
    without an answer). A call left unanswered is fine: it records an
    interrupted run, and `repair` fills it in when the history is read.
    """
    if not isinstance(messages, list):
        raise InvalidHistory("messages must be a list of message objects.", field="messages")
    for index, raw in enumerate(messages):
        _check_role(index, raw)
    validated = validate_messages(messages)

    pending = dict(open_calls or {})
    rows: list[Message] = []
    for index, (raw, message) in enumerate(zip(messages, validated, strict=True)):
        role = message["role"]
        fields: dict[str, Any] = {"role": role}
        fail: _Fail = functools.partial(_invalid, index, role)

        if role != "tool":
            if raw.get("name"):
                raise fail("'name' is stored only on tool messages.")
            if raw.get("resource_id"):
                raise fail("'resource_id' is stored only on tool messages.")

        if role == "assistant":
            for key in ("refusal", "audio", "function_call"):
                if message.get(key):
                    raise fail(f"'{key}' cannot be imported; put the text in 'content'.")
            calls = _imported_calls(message.get("tool_calls") or [], fail)
            content = message.get("content")
            if content is None and not calls:
                raise fail("an assistant message needs 'content' or 'tool_calls'.")
            fields["content"] = None if content is None else _joined_text(content, fail)
            if calls:
                fields["tool_calls"] = calls
                for call in calls:
                    # A call made again reopens its id; repair pairs by the same rule.
                    pending[call["id"]] = call["function"]["name"]
        elif role == "tool":
            call_id = message["tool_call_id"]
            if not call_id or len(call_id) > TOOL_CALL_ID_MAX_LENGTH:
                raise fail(f"tool_call_id must be 1 to {TOOL_CALL_ID_MAX_LENGTH} characters.")
            if call_id not in pending:
                raise fail(
                    f"tool_call_id {call_id!r} answers no open call: no earlier assistant "
                    "message made it, or it was already answered."
                )
            called_name = pending.pop(call_id)
            name = raw.get("name") or called_name
            if not isinstance(name, str) or not name or len(name) > NAME_MAX_LENGTH:
                raise fail(f"name must be a string of 1 to {NAME_MAX_LENGTH} characters.")
            if called_name and name != called_name:
                raise fail(f"name {name!r} differs from the called function {called_name!r}.")
            fields.update(
                tool_call_id=call_id,
                name=name,
                content=_joined_text(message["content"], fail),
                resource_id=_resource_id(raw.get("resource_id"), fail),
            )
        else:
            fields["content"] = _joined_text(message["content"], fail)

        rows.append(Message(conversation=conversation, position=start_position + index, **fields))
    return rows


def _check_role(index: int, raw: object) -> None:
    if not isinstance(raw, Mapping):
        raise InvalidHistory(
            f"Message {index}: must be an object, not {type(raw).__name__}.",
            index=index,
            field="messages",
        )
    role = raw.get("role")
    if role in STORED_ROLES:
        return
    if role == "developer":
        text = "role 'developer' is not stored; send it as 'system'."
    elif role == "function":
        text = "the deprecated role 'function' is not stored; use 'tool' messages."
    elif role is None:
        text = "'role' is missing."
    else:
        text = f"unknown role {role!r}; expected one of {', '.join(sorted(STORED_ROLES))}."
    raise InvalidHistory(f"Message {index}: {text}", index=index, field="messages")


def _joined_text(content: Any, fail: _Fail) -> str:
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for number, part in enumerate(content):
        kind = part.get("type")
        if kind != "text":
            raise fail(f"content part {number} has type {kind!r}; only text parts are stored.")
        texts.append(part["text"])
    return "\n".join(texts)


def _imported_calls(calls: list[Any], fail: _Fail) -> list[dict[str, Any]]:
    imported: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, call in enumerate(calls):
        if call.get("type") != "function":
            raise fail(f"tool_calls[{number}] has type {call.get('type')!r}; only 'function'.")
        call_id, name = call["id"], call["function"]["name"]
        if not call_id or len(call_id) > TOOL_CALL_ID_MAX_LENGTH:
            raise fail(
                f"tool_calls[{number}].id must be 1 to {TOOL_CALL_ID_MAX_LENGTH} characters."
            )
        if call_id in seen:
            raise fail(f"tool_calls[{number}].id {call_id!r} is repeated in this message.")
        if not name or len(name) > NAME_MAX_LENGTH:
            raise fail(
                f"tool_calls[{number}].function.name must be 1 to {NAME_MAX_LENGTH} characters."
            )
        seen.add(call_id)
        imported.append(tool_call_to_openai(call))
    return imported


def _resource_id(value: object, fail: _Fail) -> uuid.UUID | None:
    if value is None or value == "":
        return None
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise fail(f"resource_id {value!r} is not a UUID.") from None
