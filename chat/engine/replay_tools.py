"""A replay's tool calls with recorded tools: served from the original run's record, never run.

A replay (chat/services/replays.py) with `tools: recorded` asks the engine
for nothing new: each call its model makes is looked up among the calls of
the run it replays. The rules:

- A call matches a recorded one of the same tool whose arguments are equal
  as JSON after the tool's own validation (so `{"limit": "3"}` and
  `{"limit": 3}` match where the tool takes an integer, and a default left
  out matches it written in). The arguments compared are the ones the model
  sent, as its message holds them: the audit row's may be masked.
- A match is served the recorded call's result: what the model reads, the
  raw result, the error, and the resource its tool message linked. The row
  is `replayed`, with `replayed_from` naming the recorded call.
- A recorded call is served once per replay: of several matches, the first
  not served yet, so repeated calls read the original's repeats in order;
  a call beyond them (the replay makes more equal calls than the original
  did) is unmatched, as a tool that made a note once did not make a second.
  Equal calls of one step run at once, as tasks of their own: the database
  holds the rule (a replay's rows name a recorded call at most once, a unique
  constraint), so two of them cannot both take the same one.
- No match: nothing runs, the model is told that no recorded result exists
  for the call, and the row is `unmatched`.

Either way no tool runs, no resource is made and no approval is asked
(chat/engine/answer_store.py), so a replay has none of the turn's side effects.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import IntegrityError, transaction
from pydantic_core import to_jsonable_python

from chat.engine.ledger import call_replay_link
from chat.models import ExecutionStatus, Message, Role, Run, ToolExecution
from tools.arguments import ArgumentsInvalid
from tools.registry import registry as tool_registry
from tools.results import ToolResult

# The recorded calls that can be served: those that ended with a result the model read.
_SERVABLE = (
    ExecutionStatus.SUCCEEDED,
    ExecutionStatus.FAILED,
    ExecutionStatus.TIMED_OUT,
    ExecutionStatus.REPLAYED,
)


def arguments_normal(name: str, arguments: str) -> Any:
    """A call's arguments as the tool sees them, as JSON (what two calls are compared by).

    The tool's own validation fills defaults and coerces types; arguments it
    refuses, or that are no JSON, compare as their text.
    """
    try:
        decoded = json.loads(arguments) if arguments.strip() else {}
    except (TypeError, ValueError):
        return arguments
    spec = tool_registry.get(name)
    if spec is None or not isinstance(decoded, dict):
        return decoded
    try:
        return to_jsonable_python(spec.validate_arguments(decoded))
    except (ArgumentsInvalid, ValueError, TypeError):
        return decoded


def recorded_result(run: Run, execution: ToolExecution, arguments: str) -> ToolResult:
    """The result a replayed call is served, from the original run's record (nothing runs).

    Marks the row with the recorded call it reuses, if any; its status and the
    rest are written with the result, as every result is.
    """
    match = _recorded_link(run, execution, arguments)
    if match is None:
        error = (
            f"No recorded result exists for this call of {execution.name}: the original run "
            "made no call of it with these arguments. This is a replay with recorded tools, "
            "so the tool did not run."
        )
        content = json.dumps({"success": False, "error": error}, ensure_ascii=False)
        return ToolResult(
            name=execution.name,
            status=ExecutionStatus.UNMATCHED,
            content=content,
            error=error,
            error_type="unmatched",
            result_chars=len(content),
            tool_call_id=execution.tool_call_id,
        )
    resource_id = (
        Message.objects.filter(
            conversation_id=match.run.conversation_id,
            role=Role.TOOL,
            tool_call_id=match.tool_call_id,
        )
        .values_list("resource_id", flat=True)
        .first()
    )
    content = match.content or ""
    return ToolResult(
        name=execution.name,
        status=ExecutionStatus.REPLAYED,
        content=content,
        result=match.result,
        error=match.error,
        result_chars=match.result_chars or len(content),
        truncated=match.truncated,
        resource_id=str(resource_id) if resource_id else None,
        tool_call_id=execution.tool_call_id,
    )


def _recorded_link(run: Run, execution: ToolExecution, arguments: str) -> ToolExecution | None:
    """Link the call to the first of the original's calls it matches that no other call of
    this replay was served, and return it; None when there is none left.

    The link is written ahead of the result (it is what the row is, whoever
    stores the result), each try in a transaction of its own: a call of the
    same step that took the candidate first makes the unique constraint refuse
    it, and the next one is tried. A call linked already (its task delivered
    again) keeps its link.
    """
    if run.replay_of_id is None:
        return None
    wanted = arguments_normal(execution.name, arguments)
    recorded = (
        ToolExecution.objects.filter(
            run_id=run.replay_of_id, name=execution.name, status__in=_SERVABLE
        )
        .select_related("message", "run")
        .order_by("created_at", "tool_call_id")
    )
    matches = [
        candidate
        for candidate in recorded
        if arguments_normal(candidate.name, call_arguments(candidate)) == wanted
    ]
    linked = next((c for c in matches if c.pk == execution.replayed_from_id), None)
    if linked is not None:
        return linked
    served = set(
        ToolExecution.objects.filter(run=run, replayed_from__isnull=False)
        .exclude(pk=execution.pk)
        .values_list("replayed_from_id", flat=True)
    )
    for candidate in matches:
        if candidate.pk in served:
            continue
        try:
            with transaction.atomic():
                call_replay_link(execution, candidate)
        except IntegrityError:
            continue  # another call of this replay took it meanwhile
        return candidate
    return None


def call_arguments(execution: ToolExecution) -> str:
    """The arguments of a call exactly as the model sent them (`execution.message` loaded)."""
    return next(
        (
            call["function"]["arguments"]
            for call in execution.message.tool_calls or []
            if call.get("id") == execution.tool_call_id
        ),
        "{}",
    )
