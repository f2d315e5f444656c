"""Two runs side by side: a replay and its original, or any two runs of one user (reads only).

`runs_compare` answers what docs/replay.md promises of a comparison: for each
run its final answer, its tool calls in order, its steps, model calls,
latency, time to first token and tokens; and between them a word-level diff
of the answers, their similarity, and the tool calls step by step.

What a comparison reads of a run (its model calls, its tool calls, its
answer) is a `RunRecord`; `run_records` reads those of any number of runs in
three queries, so that a report of many replays (chat/replay_report.py)
costs no more queries than one comparison.

A tool call is read the same way whatever run made it: a run that ran or
replayed its tools has audit rows (ToolExecution); a forced replay ran none,
and its calls are what its model answered at each of the original's steps
(`ModelCall.forced_answer`). Each call says how it was answered:
`matched` (served a recorded result; in a forced replay, the same tool with
equal arguments as the original's call at that step), `unmatched`, or `live`
(it ran).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from chat.engine.replay_tools import arguments_normal, call_arguments
from chat.exceptions import RunNotFound
from chat.models import (
    ExecutionStatus,
    Message,
    ModelCall,
    ReplayMode,
    Role,
    Run,
    RunStatus,
    ToolExecution,
)
from chat.selectors import run_get

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

_WORDS = re.compile(r"\s+|[^\s]+")


@dataclasses.dataclass(frozen=True)
class ComparedCall:
    """One tool call of a run, as a comparison shows it."""

    step: int
    name: str
    arguments: Any  # as the tool sees them (chat/engine/replay_tools.py `arguments_normal`)
    status: str  # the audit row's, or "" for a forced replay's call (none ran)
    match: str  # matched, unmatched or live
    replayed_from: str | None


@dataclasses.dataclass(frozen=True)
class ComparedRun:
    """One run's side of a comparison."""

    run: Run
    answer: str | None
    calls: list[ComparedCall]
    model_calls: list[ModelCall]

    def summary(self) -> dict[str, Any]:
        """Its side as the API answers it."""
        run, calls = self.run, self.model_calls
        prompt = [c.prompt_tokens for c in calls if c.prompt_tokens is not None]
        completion = [c.completion_tokens for c in calls if c.completion_tokens is not None]
        first = next((c for c in calls if c.first_token_ms is not None), None)
        return {
            "id": str(run.pk),
            "conversation_id": str(run.conversation_id),
            "replay_of": str(run.replay_of_id) if run.replay_of_id else None,
            "replay_tools": run.replay_tools,
            "replay_mode": run.replay_mode,
            "status": run.status,
            "models": list(dict.fromkeys(c.provider_model for c in calls)),
            "answer": self.answer,
            "tool_calls": [dataclasses.asdict(call) for call in self.calls],
            "steps": run.steps,
            "model_calls": run.model_calls,
            "latency_ms": run.latency_ms,
            "first_token_ms": first.first_token_ms if first else None,
            "prompt_tokens": sum(prompt) if prompt else None,
            "completion_tokens": sum(completion) if completion else None,
        }


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What a comparison reads of one run."""

    model_calls: list[ModelCall]  # in the order they started
    executions: list[ToolExecution]  # by step, then creation; each with its `message`
    answer: str | None  # the final answer of a completed run


def run_records(runs: Iterable[Run]) -> dict[uuid.UUID, RunRecord]:
    """The records of `runs`, by run id: three queries, however many runs."""
    by_id = {run.pk: run for run in runs}
    calls: defaultdict[uuid.UUID, list[ModelCall]] = defaultdict(list)
    for call in ModelCall.objects.filter(run_id__in=by_id).order_by("started_at", "step"):
        calls[call.run_id].append(call)
    executions: defaultdict[uuid.UUID, list[ToolExecution]] = defaultdict(list)
    for row in (
        ToolExecution.objects.filter(run_id__in=by_id)
        .select_related("message")
        .order_by("step", "created_at", "tool_call_id")
    ):
        executions[row.run_id].append(row)
    # A run's answer is its last assistant message without calls (None if it has none).
    answers: dict[uuid.UUID, str | None] = {}
    completed = [pk for pk, run in by_id.items() if run.status == RunStatus.COMPLETED]
    for run_id, content in (
        Message.objects.filter(run_id__in=completed, role=Role.ASSISTANT, tool_calls__isnull=True)
        .order_by("run_id", "-position")
        .values_list("run_id", "content")
    ):
        answers.setdefault(run_id, content)
    return {pk: RunRecord(calls[pk], executions[pk], answers.get(pk)) for pk in by_id}


def runs_compare(
    *, run_id: Any, other_id: Any, user: AbstractBaseUser | AnonymousUser
) -> dict[str, Any]:
    """Two of the user's runs side by side; RunNotFound (naming `with`) for the second."""
    first = run_get(run_id=run_id, user=user)
    try:
        second = run_get(run_id=other_id, user=user)
    except RunNotFound:
        raise RunNotFound("Run not found.", field="with") from None
    return comparison(first, second)


def comparison(
    first: Run, second: Run, *, records: Mapping[uuid.UUID, RunRecord] | None = None
) -> dict[str, Any]:
    """The comparison of two runs (whose owner was checked): both sides, the diff, the steps.

    `records` holds the runs' records when the caller read them already
    (`run_records`: both runs', and a forced replay's original's).
    """
    original = _original_of(first, second)
    if records is None:
        records = run_records([first, second, *([original] if original else [])])
    one, two = compared_run(first, original, records), compared_run(second, original, records)
    words_one, words_two = _words(one.answer), _words(two.answer)
    matcher = difflib.SequenceMatcher(a=words_one, b=words_two, autojunk=False)
    return {
        "runs": [one.summary(), two.summary()],
        "answer_similarity": round(matcher.ratio(), 4)
        if (one.answer is not None and two.answer is not None)
        else None,
        "answer_diff": _diff(matcher, words_one, words_two),
        "same_tool_calls": _signature(one.calls) == _signature(two.calls),
        "steps": _steps(one.calls, two.calls),
    }


def compared_run(
    run: Run, original: Run | None, records: Mapping[uuid.UUID, RunRecord]
) -> ComparedRun:
    """A run's side: its answer, its calls (each matched or not), its model calls."""
    record = records[run.pk]
    if run.replay_mode == ReplayMode.FORCED and original is not None:
        calls = _forced_calls(record.model_calls, _executed_calls(records[original.pk]))
    else:
        calls = _executed_calls(record)
    return ComparedRun(run, record.answer, calls, record.model_calls)


def _original_of(first: Run, second: Run) -> Run | None:
    """The run a forced replay among the two replays (the other, or its own original)."""
    for run, other in ((first, second), (second, first)):
        if run.replay_mode == ReplayMode.FORCED:
            return other if other.pk == run.replay_of_id else run.replay_of
    return None


def _executed_calls(record: RunRecord) -> list[ComparedCall]:
    return [
        ComparedCall(
            step=row.step,
            name=row.name,
            arguments=arguments_normal(row.name, call_arguments(row)),
            status=row.status,
            match=_MATCH.get(row.status, "live"),
            replayed_from=str(row.replayed_from_id) if row.replayed_from_id else None,
        )
        for row in record.executions
    ]


_MATCH: dict[str, str] = {
    ExecutionStatus.REPLAYED: "matched",
    ExecutionStatus.UNMATCHED: "unmatched",
}


def _forced_calls(model_calls: list[ModelCall], recorded: list[ComparedCall]) -> list[ComparedCall]:
    """A forced replay's calls: what its model answered at each step, against the original's."""
    calls = []
    for model_call in model_calls:
        answer = model_call.forced_answer or {}
        at_step = [(c.name, c.arguments) for c in recorded if c.step == model_call.step]
        for call in answer.get("tool_calls") or []:
            function = call.get("function") or {}
            name = str(function.get("name", ""))
            arguments = arguments_normal(name, str(function.get("arguments", "")))
            calls.append(
                ComparedCall(
                    step=model_call.step,
                    name=name,
                    arguments=arguments,
                    status="",
                    match="matched" if (name, arguments) in at_step else "unmatched",
                    replayed_from=None,
                )
            )
    return calls


def _signature(calls: list[ComparedCall]) -> list[tuple[str, str]]:
    return [(c.name, json.dumps(c.arguments, sort_keys=True)) for c in calls]


def _steps(one: list[ComparedCall], two: list[ComparedCall]) -> list[dict[str, Any]]:
    """The calls of each step of either run, side by side, and whether they are the same."""
    steps = sorted({c.step for c in one} | {c.step for c in two})
    rows = []
    for step in steps:
        mine = [c for c in one if c.step == step]
        theirs = [c for c in two if c.step == step]
        rows.append(
            {
                "step": step,
                "calls": [[_brief(c) for c in mine], [_brief(c) for c in theirs]],
                "same": _signature(mine) == _signature(theirs),
            }
        )
    return rows


def _brief(call: ComparedCall) -> dict[str, Any]:
    return {"name": call.name, "arguments": call.arguments, "match": call.match}


def _words(text: str | None) -> list[str]:
    return _WORDS.findall(text or "")


def _diff(
    matcher: difflib.SequenceMatcher[str], one: list[str], two: list[str]
) -> list[dict[str, str]]:
    """The answers' word-level diff: equal, delete (only in the first) and insert (only in the second)."""
    parts: list[dict[str, str]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            parts.append({"op": "equal", "text": "".join(one[i1:i2])})
            continue
        if i2 > i1:
            parts.append({"op": "delete", "text": "".join(one[i1:i2])})
        if j2 > j1:
            parts.append({"op": "insert", "text": "".join(two[j1:j2])})
    return parts
