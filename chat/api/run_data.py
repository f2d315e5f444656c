"""A run as the API shows it (RunSerializer's fields), built directly, for the hot paths.

Every `?wait=true` answers a run (and so do the run detail and a cancel): DRF
builds a ModelSerializer's fields from the model for every instance, three of
them for a run, which was a third of that answer's CPU. The fields are
RunSerializer's, ModelCallSerializer's and ToolExecutionSerializer's
(chat/api/serializers.py), in their order; tests/chat/api/test_serializers.py
holds the two to one output, byte for byte.
"""

from __future__ import annotations

from typing import Any

from chat.history import cost_figure
from chat.models import ModelCall, Run, ToolExecution, model_steps
from chat.timestamps import iso_time

_RUN_FIELDS = ("model_calls", "error", "client_options", "client_tools")
# ModelCallSerializer lists its fields with these two, so the order is said once.
CALL_FIELDS = (
    "step",
    "purpose",
    "model",
    "provider",
    "status",
    "error",
    "finish_reason",
    "message_count",
    "request_hash",
)
CALL_FIGURES = (
    "first_token_ms",
    "latency_ms",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "attempts",
)
_EXECUTION_FIELDS = ("step", "tool_call_id", "name", "arguments", "arguments_raw", "status")
_EXECUTION_RESULT = ("decision_reason", "result", "content", "result_chars", "truncated", "error")


def _uuid(value: Any) -> str | None:
    return None if value is None else str(value)


def _plain(row: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """Columns whose value is their representation (a choice's as its string)."""
    values = {name: getattr(row, name) for name in names}
    return {name: str(v) if isinstance(v, str) else v for name, v in values.items()}


def _model_call_data(call: ModelCall) -> dict[str, Any]:
    return {
        "id": str(call.pk),
        **_plain(call, CALL_FIELDS),
        "tools_offered": [str(name) for name in call.tools_offered or []],
        "response_message_id": _uuid(call.response_message_id),
        "started_at": iso_time(call.started_at),
        **_plain(call, CALL_FIGURES),
        "cost_usd": cost_figure(call.cost_usd),
        "forced_answer": call.forced_answer,
    }


def _execution_data(execution: ToolExecution) -> dict[str, Any]:
    return {
        "id": str(execution.pk),
        "run_id": _uuid(execution.run_id),
        "conversation_id": _uuid(getattr(execution, "conversation_id", None)),
        "message_id": _uuid(execution.message_id),
        **_plain(execution, _EXECUTION_FIELDS),
        "approved_by_id": execution.approved_by_id,
        "decided_at": iso_time(execution.decided_at),
        **_plain(execution, _EXECUTION_RESULT),
        "created_at": iso_time(execution.created_at),
        "started_at": iso_time(execution.started_at),
        "finished_at": iso_time(execution.finished_at),
        "duration_ms": execution.duration_ms,
        "attempts": execution.attempts,
        "replayed_from": _uuid(execution.replayed_from_id),
        "policy": execution.policy,
        "approved_arguments": execution.approved_arguments,
        "standing_approval": execution.standing_approval_id,
    }


def calls_usage(calls: list[ModelCall]) -> dict[str, Any]:
    """The summed usage and cost of model calls; null for what none of them reported."""

    def total(name: str) -> Any:
        values = [getattr(c, name) for c in calls if getattr(c, name) is not None]
        return sum(values) if values else None

    return {
        "prompt_tokens": total("prompt_tokens"),
        "completion_tokens": total("completion_tokens"),
        "cached_tokens": total("cached_tokens"),
        "cost_usd": cost_figure(total("cost_usd")),
    }


def run_data(
    run: Run,
    calls: list[ModelCall] | None = None,
    executions: list[ToolExecution] | None = None,
) -> dict[str, Any]:
    """A run as the API shows it (RunSerializer's fields), from `run_shown`'s rows.

    Without `calls` and `executions`, from `run_detail`'s prefetched rows.
    """
    calls = list(run.model_call_rows.all()) if calls is None else calls
    executions = list(run.tool_executions.all()) if executions is None else executions
    return {
        "id": str(run.pk),
        "conversation_id": _uuid(run.conversation_id),
        "trigger_message_id": _uuid(run.trigger_message_id),
        "status": str(run.status),
        "mode": str(run.mode),
        "steps": run.steps,
        "model_steps": model_steps(calls),
        **_plain(run, _RUN_FIELDS),
        "replay_of": _uuid(run.replay_of_id),
        **_plain(run, ("replay_tools", "replay_mode")),
        "created_at": iso_time(run.created_at),
        "started_at": iso_time(run.started_at),
        "finished_at": iso_time(run.finished_at),
        "latency_ms": run.latency_ms,
        "usage": calls_usage(calls),
        "model_call_log": [_model_call_data(call) for call in calls],
        "tool_executions": [_execution_data(e) for e in executions],
    }
