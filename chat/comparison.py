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
from collections import Counter, defaultdict
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
    model_steps,
)
from chat.selectors import run_get

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

# An answer is diffed by words: each token is a word with the white space before it (and
# the answer's trailing white space is one of its own), compared by the word alone.
_TOKENS = re.compile(r"\s*\S+|\s+\Z")
# How much of the answers' differing parts is diffed word by word. difflib's matcher
# does work for every pair of equal words, again at each level of its recursion: on prose
# it is fast, on a text of few words repeated (say "a b a b ...") it grows with the cube
# of the length, 21 s for 2,000 words. So the diff takes the longest starts of the two
# parts that hold at most DIFF_MAX_PAIRS pairs of equal words and DIFF_MAX_WORDS words:
# about 3,500 words of prose, 450 of "a b a b", a fifth of a second at worst.
DIFF_MAX_WORDS = 5000
DIFF_MAX_PAIRS = 100_000


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
            "error": run.error or None,  # why a run failed, in its own words
            "models": list(dict.fromkeys(c.provider_model for c in calls)),
            "answer": self.answer,
            "tool_calls": [dataclasses.asdict(call) for call in self.calls],
            "steps": run.steps,
            "model_steps": model_steps(calls),  # the audit's "Steps" (docs/audit.md)
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
    diff = answer_diff(one.answer, two.answer)
    return {
        "runs": [one.summary(), two.summary()],
        "answer_similarity": diff.similarity
        if (one.answer is not None and two.answer is not None)
        else None,
        "answer_diff": diff.parts,
        "answer_diff_limited": diff.limited,
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


@dataclasses.dataclass(frozen=True)
class AnswerDiff:
    """Two answers' diff by words, and how alike they are (0 to 1)."""

    parts: list[dict[str, str]]  # equal, delete (only in the first), insert (only in the second)
    similarity: float
    # The answers' differing parts were too long to diff whole (DIFF_MAX_WORDS): only
    # their starts were diffed word by word; the rest is one delete and one insert,
    # counted as different in `similarity` (a lower bound then).
    limited: bool


def answer_diff(one: str | None, two: str | None) -> AnswerDiff:
    """Diff two answers word by word, white space aside, in bounded time (DIFF_MAX_PAIRS).

    The parts hold every character: the equal and deleted ones make the first
    answer, the equal and inserted ones the second. The common start and end
    are set aside first (a linear scan), so two long answers that differ in a
    few places near one another cost little.
    """
    tokens_one, tokens_two = _TOKENS.findall(one or ""), _TOKENS.findall(two or "")
    words_one, words_two = [t.lstrip() for t in tokens_one], [t.lstrip() for t in tokens_two]
    start = _common_length(words_one, words_two)
    end = _common_length(words_one[start:][::-1], words_two[start:][::-1])
    middle_one, middle_two = (
        words_one[start : len(words_one) - end],
        words_two[start : len(words_two) - end],
    )
    window = _diffed_length(middle_one, middle_two)
    diffed_one, diffed_two = middle_one[:window], middle_two[:window]
    matcher = difflib.SequenceMatcher(a=diffed_one, b=diffed_two, autojunk=False)
    opcodes: list[tuple[str, int, int, int, int]] = [("equal", 0, start, 0, start)]
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        opcodes.append((tag, start + i1, start + i2, start + j1, start + j2))
    limited = max(len(middle_one), len(middle_two)) > window
    if limited:
        i, j = start + len(diffed_one), start + len(diffed_two)
        opcodes.append(("replace", i, len(words_one) - end, j, len(words_two) - end))
    opcodes.append(
        ("equal", len(words_one) - end, len(words_one), len(words_two) - end, len(words_two))
    )
    parts = _DiffParts()
    for op, i1, i2, j1, j2 in opcodes:
        if op == "equal":
            for mine, theirs in zip(tokens_one[i1:i2], tokens_two[j1:j2], strict=True):
                parts.equal(mine, theirs)
        else:
            parts.change("".join(tokens_one[i1:i2]), "".join(tokens_two[j1:j2]))
    matched = start + end + sum(block.size for block in matcher.get_matching_blocks())
    total = len(words_one) + len(words_two)
    return AnswerDiff(parts.done(), round(2 * matched / total, 4) if total else 1.0, limited)


def _diffed_length(one: list[str], two: list[str]) -> int:
    """How many words of each differing part to diff: the most whose starts hold at most
    DIFF_MAX_PAIRS pairs of equal words, and DIFF_MAX_WORDS words."""
    seen_one: Counter[str] = Counter()
    seen_two: Counter[str] = Counter()
    pairs = 0
    for length in range(min(max(len(one), len(two)), DIFF_MAX_WORDS)):
        if length < len(one):
            pairs += seen_two[one[length]]
            seen_one[one[length]] += 1
        if length < len(two):
            pairs += seen_one[two[length]]
            seen_two[two[length]] += 1
        if pairs > DIFF_MAX_PAIRS:
            return length
    return min(max(len(one), len(two)), DIFF_MAX_WORDS)


def _common_length(one: list[str], two: list[str]) -> int:
    """How many items the two lists begin with alike."""
    return next(
        (n for n, (a, b) in enumerate(zip(one, two, strict=False)) if a != b),
        min(len(one), len(two)),
    )


class _DiffParts:
    """The diff's parts, built in order: between two equal parts, one delete and one insert."""

    def __init__(self) -> None:
        self.parts: list[dict[str, str]] = []
        self.deleted = self.inserted = self.same = ""

    def equal(self, mine: str, theirs: str) -> None:
        """A word both answers have, with the white space before it in each."""
        word = mine.lstrip()
        space_one, space_two = mine[: len(mine) - len(word)], theirs[: len(theirs) - len(word)]
        if space_one != space_two:
            self.change(space_one, space_two)
        self._flush_change()
        self.same += word if space_one != space_two else mine

    def change(self, deleted: str, inserted: str) -> None:
        self._flush_same()
        self.deleted += deleted
        self.inserted += inserted

    def done(self) -> list[dict[str, str]]:
        self._flush_same()
        self._flush_change()
        return self.parts

    def _flush_same(self) -> None:
        if self.same:
            self.parts.append({"op": "equal", "text": self.same})
            self.same = ""

    def _flush_change(self) -> None:
        for op, text in (("delete", self.deleted), ("insert", self.inserted)):
            if text:
                self.parts.append({"op": op, "text": text})
        self.deleted = self.inserted = ""
