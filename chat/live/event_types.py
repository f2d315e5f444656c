"""Every run event's type and the fields of its data, declared once.

A client reads `data` by these names (docs/events.md lists them, and a test
holds the two together). `events_publish` checks each event against its
declaration before anything is stored: an unknown type, a missing field or an
undeclared one is a bug in the publisher, and fails there, not in a client.
Fields that only some events of a type carry are `NotRequired`.
"""

# No `from __future__ import annotations` here: TypedDict reads NotRequired from
# the annotations themselves, which must not be strings for that (Python 3.11).

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

Event = tuple[str, dict[str, Any]]
"""An event before it is stored: its type, and its data as declared below."""


class RunStarted(TypedDict):
    mode: str


class MessageCreated(TypedDict):
    message_id: str
    role: str
    message: NotRequired[dict[str, Any]]  # a user's message, as the history endpoint shows it
    purpose: NotRequired[str]  # an assistant message: tools, compose, decide or direct
    step: NotRequired[int]  # ...made by a model call
    model: NotRequired[str]


class MessagesSuperseded(TypedDict):
    message_ids: list[str]
    after_message_id: NotRequired[str]  # a regenerated answer: the question it answers


class MessageDelta(TypedDict):
    message_id: str
    text: str
    reset: NotRequired[bool]  # a retried stream starts over
    reason: NotRequired[str]


class MessageCompleted(TypedDict):
    message: dict[str, Any]


class ToolCallStarted(TypedDict):
    execution_id: str
    tool_call_id: str
    name: str
    arguments: Any
    attempt: int


class ToolCallApprovalRequested(TypedDict):
    execution_id: str
    tool_call_id: str
    name: str
    arguments: Any
    description: str


class ToolCallApprovalDecided(TypedDict):
    execution_id: str
    tool_call_id: str
    name: str
    approved: bool
    reason: str
    arguments: NotRequired[Any]  # approved with other arguments: those it runs with (masked)


class ToolProgress(TypedDict):
    tool_call_id: str
    name: str
    percent: float
    message: str


class ToolEvent(TypedDict):
    tool_call_id: str
    name: str
    type: str
    data: Any


class ToolCallCompleted(TypedDict):
    execution_id: str
    tool_call_id: str
    name: str
    status: str
    duration_ms: int
    truncated: bool
    message: dict[str, Any]


class ToolsEnded(TypedDict):
    message_id: str


class MessageSuggestions(TypedDict):
    message_id: str
    suggestions: list[str]


class BudgetWarning(TypedDict):
    limit: dict[str, Any]  # the soft limit reached (chat/budgets.py `Reached.data`)
    message: str


class RunCompleted(TypedDict):
    message_id: str
    latency_ms: int | None
    model_calls: int
    steps: int


class RunFailed(TypedDict):
    error: str


class RunCancelled(TypedDict):
    cancelled_tool_calls: list[str]


EVENT_DATA: Mapping[str, type[Any]] = {
    "run.started": RunStarted,
    "message.created": MessageCreated,
    "messages.superseded": MessagesSuperseded,
    "message.delta": MessageDelta,
    "message.completed": MessageCompleted,
    "tool_call.started": ToolCallStarted,
    "tool_call.approval_requested": ToolCallApprovalRequested,
    "tool_call.approval_decided": ToolCallApprovalDecided,
    "tool.progress": ToolProgress,
    "tool.event": ToolEvent,
    "tool_call.completed": ToolCallCompleted,
    "tools.ended": ToolsEnded,
    "message.suggestions": MessageSuggestions,
    "budget.warning": BudgetWarning,
    "run.completed": RunCompleted,
    "run.failed": RunFailed,
    "run.cancelled": RunCancelled,
}

EVENT_TYPES = frozenset(EVENT_DATA)


def event_check(type: str, data: Mapping[str, Any]) -> None:
    """Raise ValueError unless `data` has exactly the fields declared for `type`."""
    declared = EVENT_DATA.get(type)
    if declared is None:
        raise ValueError(f"unknown event type {type!r}")
    required: frozenset[str] = declared.__required_keys__
    missing = required - data.keys()
    undeclared = data.keys() - required - declared.__optional_keys__
    if missing or undeclared:
        raise ValueError(
            f"event {type!r}: missing {sorted(missing)}, undeclared {sorted(undeclared)}"
        )
