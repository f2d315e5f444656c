"""Every run event's type and the fields of its data, declared once: one class each.

An event is made as an object of its class, where the record is written, and
`events_publish` stores and sends it (chat/live/events.py). Each is a frozen
dataclass, keyword-only: its type name is a `Literal` class attribute
(`TYPE`), its fields are typed, and mypy refuses a field that is missing,
misspelt or of the wrong type where the event is made, as Zulip's
`zerver/lib/event_types.py` does with pydantic. Dataclasses and not pydantic:
no validation is wanted at run time on the hot path (a `message.delta` per
interval), and the types are checked where the code is, by mypy.

On the wire an event is still `type` and `data` (`event_data`): the fields in
their declared order, with the same names. A field that only some events of a
type carry defaults to None and is left out of `data` when it is None (the
`?` fields of docs/events.md, which a test holds to these classes); a
required field is always sent, None included (`run.completed`'s
`latency_ms`).

Only data mypy cannot see is checked at run time: a tool's events come from
tools/context.py, which may not import chat, as a type name and a dict, and
`event_from` turns them into their class or refuses them.

A new event type is a class here, added to `Event`, and a row in
docs/events.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, TypedDict, get_args


class CallFields(TypedDict):
    """The fields every `tool_call.*` event starts with: which call it is about."""

    execution_id: str
    tool_call_id: str
    name: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunStarted:
    TYPE: ClassVar[Literal["run.started"]] = "run.started"
    mode: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MessageCreated:
    TYPE: ClassVar[Literal["message.created"]] = "message.created"
    message_id: str
    role: str
    message: dict[str, Any] | None = None  # a user's message, as the history endpoint shows it
    purpose: str | None = None  # an assistant message: tools, compose, decide or direct
    step: int | None = None  # ...made by a model call
    model: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MessagesSuperseded:
    TYPE: ClassVar[Literal["messages.superseded"]] = "messages.superseded"
    message_ids: list[str]
    after_message_id: str | None = None  # a regenerated answer: the question it answers


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MessageDelta:
    TYPE: ClassVar[Literal["message.delta"]] = "message.delta"
    message_id: str
    # A retried stream starts over: `reset` and the `reason`, with an empty text.
    # Declared before `text`, so that its data reads as it always did.
    reset: bool | None = None
    reason: str | None = None
    text: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MessageCompleted:
    TYPE: ClassVar[Literal["message.completed"]] = "message.completed"
    message: dict[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallStarted:
    TYPE: ClassVar[Literal["tool_call.started"]] = "tool_call.started"
    execution_id: str
    tool_call_id: str
    name: str
    arguments: Any
    attempt: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallApprovalRequested:
    TYPE: ClassVar[Literal["tool_call.approval_requested"]] = "tool_call.approval_requested"
    execution_id: str
    tool_call_id: str
    name: str
    arguments: Any
    description: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallApprovalDecided:
    TYPE: ClassVar[Literal["tool_call.approval_decided"]] = "tool_call.approval_decided"
    execution_id: str
    tool_call_id: str
    name: str
    approved: bool
    reason: str
    arguments: Any = None  # approved with other arguments: those it runs with (masked)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolProgress:
    TYPE: ClassVar[Literal["tool.progress"]] = "tool.progress"
    tool_call_id: str
    name: str
    percent: float
    message: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolEvent:
    TYPE: ClassVar[Literal["tool.event"]] = "tool.event"
    tool_call_id: str
    name: str
    type: str  # the tool's own name for it
    data: Any


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallCompleted:
    TYPE: ClassVar[Literal["tool_call.completed"]] = "tool_call.completed"
    execution_id: str
    tool_call_id: str
    name: str
    status: str
    duration_ms: int
    truncated: bool
    message: dict[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolsEnded:
    TYPE: ClassVar[Literal["tools.ended"]] = "tools.ended"
    message_id: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MessageSuggestions:
    TYPE: ClassVar[Literal["message.suggestions"]] = "message.suggestions"
    message_id: str
    suggestions: list[str]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BudgetWarning:
    TYPE: ClassVar[Literal["budget.warning"]] = "budget.warning"
    limit: dict[str, Any]  # the soft limit reached (chat/budgets.py `Reached.data`)
    message: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunCompleted:
    TYPE: ClassVar[Literal["run.completed"]] = "run.completed"
    message_id: str
    latency_ms: int | None
    model_calls: int
    steps: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunFailed:
    TYPE: ClassVar[Literal["run.failed"]] = "run.failed"
    error: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunCancelled:
    TYPE: ClassVar[Literal["run.cancelled"]] = "run.cancelled"
    cancelled_tool_calls: list[str]


Event = (
    RunStarted
    | MessageCreated
    | MessagesSuperseded
    | MessageDelta
    | MessageCompleted
    | ToolCallStarted
    | ToolCallApprovalRequested
    | ToolCallApprovalDecided
    | ToolProgress
    | ToolEvent
    | ToolCallCompleted
    | ToolsEnded
    | MessageSuggestions
    | BudgetWarning
    | RunCompleted
    | RunFailed
    | RunCancelled
)
"""An event before it is stored: one of the classes above."""

EVENT_CLASSES: Mapping[str, type[Event]] = {cls.TYPE: cls for cls in get_args(Event)}

EVENT_TYPES = frozenset(EVENT_CLASSES)

EVENT_FIELDS: Mapping[type[Event], tuple[tuple[str, bool], ...]] = {
    cls: tuple(
        (field.name, field.default is dataclasses.MISSING) for field in dataclasses.fields(cls)
    )
    for cls in EVENT_CLASSES.values()
}
"""Each class's fields in order, each with whether it is required (has no default)."""


def event_data(event: Event) -> dict[str, Any]:
    """The event's `data` as stored and sent: its fields, but optional ones that are None."""
    data: dict[str, Any] = {}
    for name, required in EVENT_FIELDS[type(event)]:
        value = getattr(event, name)
        if required or value is not None:
            data[name] = value
    return data


def event_from(type: str, data: Mapping[str, Any]) -> Event:
    """The event of `type` with `data` as its fields: for data made where mypy cannot see.

    Raises ValueError for an unknown type, or a field missing or undeclared.
    """
    cls = EVENT_CLASSES.get(type)
    if cls is None:
        raise ValueError(f"unknown event type {type!r}")
    fields = EVENT_FIELDS[cls]
    missing = {name for name, required in fields if required} - data.keys()
    undeclared = data.keys() - {name for name, _ in fields}
    if missing or undeclared:
        raise ValueError(
            f"event {type!r}: missing {sorted(missing)}, undeclared {sorted(undeclared)}"
        )
    return cls(**data)
