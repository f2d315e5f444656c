"""What a tool call's outcome is, and the canned outcomes of calls that never ran or ended early."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tools.context import ToolContext


__all__ = [
    "ToolOutput",
    "ToolResult",
    "ToolStatus",
    "cancelled_result",
    "denied_result",
    "interrupted_result",
    "rejected_result",
    "truncate_content",
]


class ToolStatus(enum.StrEnum):
    """How a call ended; the values are chat.models.ExecutionStatus values."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    REJECTED = "rejected"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"


@dataclass
class ToolOutput:
    """What a tool returns when what the audit keeps and what the model reads differ.

    An MCP result is one: the audit keeps its content items and structured
    content as the server sent them; the model reads their text. `error` set
    means the call failed in the tool's own words (the model reads `content`).
    """

    result: Any
    content: str
    error: str = ""


@dataclass
class ToolResult:
    """The outcome of one tool call: what the model is sent and what the audit keeps."""

    name: str
    status: str
    content: str
    result: Any = None
    error: str = ""
    error_type: str = ""
    traceback: str = ""
    duration_ms: int = 0
    result_chars: int = 0
    truncated: bool = False
    audit_arguments: dict[str, Any] | None = None
    arguments_raw: str = ""
    resource_id: str | None = None
    # The Resource row itself (not stored, not compared): the tool message links it as is.
    resource: Any = field(default=None, repr=False, compare=False)
    return_direct: bool = False
    tool_call_id: str = ""

    def execution_fields(self) -> dict[str, Any]:
        """The ToolExecution columns this result fills (status, result, content...)."""
        error = self.error
        if self.traceback:
            error = f"{error}\n\n{self.traceback}" if error else self.traceback
        return {
            "status": str(self.status),
            "arguments": self.audit_arguments,
            "arguments_raw": self.arguments_raw,
            "result": self.result,
            "content": self.content,
            "result_chars": self.result_chars,
            "truncated": self.truncated,
            "error": error,
            "duration_ms": self.duration_ms,
        }


def client_result(
    name: str, content: str, *, duration_ms: int, tool_call_id: str = ""
) -> ToolResult:
    """The result a /v1 client sent for a call of its own tool: what the model is sent."""
    return ToolResult(
        name=name,
        status=str(ToolStatus.SUCCEEDED),
        content=content,
        result={"content": content},
        result_chars=len(content),
        duration_ms=duration_ms,
        tool_call_id=tool_call_id,
    )


def rejected_result(name: str, reason: str = "", *, tool_call_id: str = "") -> ToolResult:
    """The result of a call that was refused at approval: it never ran."""
    error = f"The call to {name} was rejected by the user: {reason or 'no reason given'}."
    error = f"{error} It did not run."
    return _ended_result(name, ToolStatus.REJECTED, error, reason, tool_call_id)


def denied_result(name: str, reason: str, *, tool_call_id: str = "") -> ToolResult:
    """The result of a call that a tool policy refuses: it never ran, and never will."""
    error = (
        f"The call to {name} is not allowed here ({reason}). It did not run; do not call it again."
    )
    return _ended_result(name, ToolStatus.REJECTED, error, reason, tool_call_id)


def interrupted_result(
    name: str, reason: str = "", *, tool_call_id: str = "", started: bool = True
) -> ToolResult:
    """The result of a call whose worker stopped before it finished; it may have had effects."""
    error = (
        f"The call to {name} was interrupted before it finished; "
        "it may or may not have taken effect."
    )
    return _ended_result(name, ToolStatus.INTERRUPTED, error, reason, tool_call_id)


def cancelled_result(
    name: str, reason: str = "", *, tool_call_id: str = "", started: bool = False
) -> ToolResult:
    """The result of a call dropped because its run was cancelled.

    One that had `started` may have done its work: it says so (and if it ends
    after all, chat/engine/tool_calls.py stores what it did in its place).
    """
    error = f"The call to {name} was cancelled with its run and did not complete."
    if started:
        error = (
            f"The call to {name} was running when its run was cancelled; "
            "it may or may not have taken effect."
        )
    return _ended_result(name, ToolStatus.CANCELLED, error, reason, tool_call_id)


def truncate_content(text: str, limit: int) -> tuple[str, bool]:
    """Cut text to at most `limit` characters, ending with a marker that says how much went."""
    if len(text) <= limit:
        return text, False
    total = len(text)
    keep = limit
    # The marker's length depends on the number it shows; two rounds settle it.
    for _ in range(3):
        marker = f"\n...[truncated: {total - keep} of {total} characters cut]"
        keep = max(0, limit - len(marker))
    marker = f"\n...[truncated: {total - keep} of {total} characters cut]"
    return text[:keep] + marker, True


def _failure(
    name: str,
    context: ToolContext | None,
    error_type: str,
    error: str,
    details: Any,
    *,
    status: ToolStatus = ToolStatus.FAILED,
) -> ToolResult:
    payload = {"success": False, "error": error, "details": details}
    content = json.dumps(payload, ensure_ascii=False, default=str)
    # `result` stays None: the tool returned nothing; `content` is the executor's.
    return ToolResult(
        name=name,
        status=status,
        content=content,
        error=error,
        error_type=error_type,
        result_chars=len(content),
        resource_id=context.last_resource_id if context else None,
        resource=context.last_resource if context else None,
        tool_call_id=context.tool_call_id if context else "",
    )


def _ended_result(
    name: str, status: ToolStatus, error: str, reason: str, tool_call_id: str
) -> ToolResult:
    result = _failure(name, None, str(status), error, {"reason": reason} if reason else None)
    result.status = status
    result.tool_call_id = tool_call_id
    return result
