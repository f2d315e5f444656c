"""The OpenAI Chat Completions codec: stored rows as a model and the API see them.

Stored rows (chat.models.Message) become the exact message dicts of the OpenAI
Chat Completions API, and a run's history is kept as its model calls send it:
repaired and trimmed by the guards of chat/history_guards.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, NamedTuple, Protocol

from chat.history_guards import OpenAIMessage, call_ids, repair, trim
from chat.images import image_parts
from chat.markdown import markdown_html
from chat.models import Message, Role
from chat.timestamps import iso_time
from tools.models import Resource

# --- Rows to OpenAI -------------------------------------------------------------------


class StoredMessage(Protocol):
    """What `message_to_openai` reads of a stored message: a Message, or a HistoryRow."""

    @property
    def position(self) -> int: ...
    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str | None: ...
    @property
    def tool_calls(self) -> Any: ...
    @property
    def tool_call_id(self) -> str: ...


class HistoryRow(NamedTuple):
    """A stored message as a history read returns it: its columns, not a model instance.

    Building a Message for each of the hundreds of rows a long conversation's
    history reads cost more than the query (chat/selectors.py `history_rows`).
    """

    position: int
    role: str
    content: str | None
    tool_calls: Any
    tool_call_id: str
    # A user message's images as a model is sent them, each {"url", "detail"} (url None
    # for one since deleted): chat/history_rows.py reads them with the rows.
    image_urls: list[dict[str, Any]] | None = None


def message_to_openai(message: StoredMessage) -> OpenAIMessage:
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
    images = getattr(message, "image_urls", None)
    if role == Role.USER and images:
        # OpenAI's content parts: the text, then each image (chat/images.py).
        return {"role": "user", "content": image_parts(message.content or "", images)}
    if role in (Role.SYSTEM, Role.USER):
        return {"role": str(role), "content": message.content or ""}
    raise ValueError(f"the message at {message.position} has the unknown role {role!r}")


def cost_figure(cost: Decimal | None) -> float | None:
    """A stored cost as the API writes it: a JSON number of US dollars, or null (no price)."""
    return None if cost is None else float(cost)


def message_to_api(message: Message) -> dict[str, Any]:
    """One stored row as the REST API and the export show it: OpenAI fields plus ours."""
    usage = None
    if message.prompt_tokens is not None or message.completion_tokens is not None:
        usage = {
            "prompt_tokens": message.prompt_tokens,
            "completion_tokens": message.completion_tokens,
            "cost_usd": cost_figure(message.cost_usd),
        }
    data: dict[str, Any] = {"id": str(message.id), **message_to_openai(message)}
    if message.role == Role.TOOL:
        data["name"] = message.name
    data.update(
        {
            "position": message.position,
            "created_at": iso_time(message.created_at),
            "run_id": str(message.run_id) if message.run_id else None,
            "resource_id": str(message.resource_id) if message.resource_id else None,
            "latency_ms": message.latency_ms,
            "model": message.model or None,
            "usage": usage,
            "finish_reason": message.finish_reason or None,
        }
    )
    if message.role == Role.ASSISTANT:
        # The text as sanitized HTML (chat/markdown.py): what a page may insert as it is.
        data["html"] = markdown_html(message.content) if message.content else None
        data["suggestions"] = message.suggestions or None
        # What the model wrote before answering: shown, never sent back (message_to_openai).
        data["reasoning"] = message.reasoning or None
    if message.role == Role.USER and message.images:
        # What each image is, not its bytes: those are its resource's (GET /api/v1/resources/).
        data["images"] = message.images
    if message.resource_id:
        data["resource"] = resource_summary(message.resource)
    if message.superseded_at is not None:
        data["superseded_at"] = iso_time(message.superseded_at)
    return data


def resource_summary(resource: Resource | None) -> dict[str, Any] | None:
    """What a resource card shows: kind, title, when; None for a resource since deleted."""
    if resource is None:
        return None
    return {
        "id": str(resource.pk),
        "kind": resource.kind,
        "title": resource.title,
        "created_at": iso_time(resource.created_at),
        # Equal to the tool message's `tool_execution_id` when this call made it (not read it).
        "created_by_execution_id": (
            str(resource.created_by_execution_id) if resource.created_by_execution_id else None
        ),
    }


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
    messages: Iterable[StoredMessage],
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


class RunHistory:
    """A run's history for its model calls: each row converted once, the whole repaired once.

    A run makes several model calls over one history that only grows by what
    the run stores. `messages()` gives what `build_model_history` would give
    for the rows so far, but converts only the rows added since its last call,
    and repairs only them when they are whole (`_closed`): each tool message
    answers a call among them, so that neither part can pair with the other.
    Otherwise (a taken-over run answering a call it read) it repairs the whole
    again.
    """

    def __init__(self, rows: Iterable[StoredMessage], *, system_prompt: str = "") -> None:
        self._rows: list[StoredMessage] = list(rows)
        self._head: list[OpenAIMessage] = (
            [{"role": "system", "content": system_prompt}] if system_prompt else []
        )
        self._converted: list[OpenAIMessage] = []
        self._repaired: list[OpenAIMessage] = []
        self._repaired_rows = -1  # rows the repaired history covers; -1 before the first
        # The trimmings of the repaired history so far, by budgets: a load checks one,
        # then the first model call asks for it again (chat/history_rows.py
        # `history_kept`). Emptied when rows are added.
        self._trimmed: dict[tuple[int | None, int | None], list[OpenAIMessage]] = {}

    def append(self, row: StoredMessage) -> None:
        """A row the run stored, after those it read."""
        self._rows.append(row)

    def messages(
        self, *, max_messages: int | None = None, max_chars: int | None = None
    ) -> list[OpenAIMessage]:
        """The history for a model call: prompt first, repaired, trimmed (a new list).

        The list is new; its message dicts are the history's own, handed to every
        call (chat/engine/request.py `RequestHasher` relies on it): read-only.
        """
        return list(self._trim(max_messages, max_chars))

    def sizes(self, *, max_messages: int | None, max_chars: int | None) -> tuple[int, int]:
        """How many messages `messages()` gives untrimmed, and trimmed to these budgets."""
        return len(self._repair()), len(self._trim(max_messages, max_chars))

    def _trim(self, max_messages: int | None, max_chars: int | None) -> list[OpenAIMessage]:
        repaired = self._repair()
        key = (max_messages, max_chars)
        trimmed = self._trimmed.get(key)
        if trimmed is None:
            trimmed = self._trimmed[key] = trim(
                repaired, max_messages=max_messages, max_chars=max_chars
            )
        return trimmed

    def _repair(self) -> list[OpenAIMessage]:
        """The rows so far converted and repaired (each row converted once)."""
        if self._repaired_rows == len(self._rows):
            return self._repaired
        self._converted.extend(message_to_openai(row) for row in self._rows[len(self._converted) :])
        if self._repaired_rows < 0:
            self._repaired = repair([*self._head, *self._converted])
        else:
            tail = self._converted[self._repaired_rows :]
            if _closed(tail):
                self._repaired = [*self._repaired, *repair(tail)]
            else:
                self._repaired = repair([*self._head, *self._converted])
        self._repaired_rows = len(self._converted)
        self._trimmed.clear()
        return self._repaired


def _closed(tail: Sequence[Mapping[str, Any]]) -> bool:
    """Whether messages appended to a history can be repaired apart from it.

    They can when every tool message among them answers a call made before it
    among them. An earlier call with the same id pairs only with answers before
    that later call (`_answers_paired`), and an earlier answer comes before the
    new call: so neither part can pair with the other, and repairing the whole
    gives the two repaired apart, one after the other (a test holds this over
    random histories, reused ids and stray answers included).
    """
    calls: set[str] = set()
    for message in tail:
        if message.get("role") == "tool" and str(message.get("tool_call_id")) not in calls:
            return False
        calls.update(call_ids(message))
    return True
