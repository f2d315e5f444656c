"""The guards that keep a history valid for a model: repair and trim.

Whatever is stored, the history handed to a model obeys the API's pairing
rule (DESIGN.md section 3): every assistant `tool_calls` entry is answered by
exactly one `tool` message with the same `tool_call_id`, right after the
assistant message and before any other role; trimming old history never
splits a call from its answers.

The guards are pure functions over OpenAI dicts (chat/history.py makes them
from stored rows), so that every provider and every continuation policy gets
them for free and the tests can exercise them without a database. A call
whose answer was never stored is answered with the executor's `interrupted`
result, the same one a worker that died mid-call leaves.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from tools.results import interrupted_result

# The history's logger, as it was named before the guards had a module of their own.
logger = logging.getLogger("chat.history")

OpenAIMessage = dict[str, Any]
"""One message in the shape of openai.types.chat.ChatCompletionMessageParam."""

# Leading messages of these roles are instructions: trimming always keeps them.
INSTRUCTION_ROLES: Final = frozenset({"system", "developer"})


def repair(messages: Sequence[Mapping[str, Any]]) -> list[OpenAIMessage]:
    """Make a history obey the pairing rule: fill missing answers, drop strays, regroup."""
    history = [_normalized(message) for message in messages]
    # What the engine stores already obeys it: one pass says so (a third of the
    # time of the pairing below, on a long history).
    return history if _paired(history) else _rebuilt(history)


def _paired(history: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a normalized history obeys the pairing rule, so that repairing keeps it as it is.

    Each assistant message's calls are answered right after it, each once (in
    any order), and no other tool message is there; every id is a string, as
    stored ones are. `_rebuilt` gives such a history back unchanged (a test
    holds the two to each other).
    """
    waiting: set[str] = set()
    for message in history:
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or call_id not in waiting:
                return False
            waiting.discard(call_id)
            continue
        if waiting:
            return False
        if "tool_calls" in message and message.get("role") == "assistant":
            waiting = {call.get("id") for call in message["tool_calls"]}
            if not all(isinstance(call_id, str) for call_id in waiting):
                return False
    return not waiting


def _rebuilt(history: list[OpenAIMessage]) -> list[OpenAIMessage]:
    """A normalized history rebuilt to obey the pairing rule (`repair`)."""
    callers: dict[str, list[int]] = {}
    for index, message in enumerate(history):
        for call_id in call_ids(message):
            callers.setdefault(call_id, []).append(index)
    claimed = _answers_paired(history, callers)
    claimed_indexes = {answer for answers in claimed.values() for answer in answers}

    repaired: list[OpenAIMessage] = []
    for index, message in enumerate(history):
        if message.get("role") != "tool":
            repaired.append(message)
            repaired.extend(_answers_after(history, index, sorted(claimed.get(index, []))))
        elif index not in claimed_indexes:
            call_id = str(message.get("tool_call_id"))
            earlier = [c for c in callers.get(call_id, []) if c < index]
            reason = "its call was already answered" if earlier else "no earlier call has it"
            logger.warning("Dropped tool message for tool_call_id %s: %s.", call_id, reason)
    return repaired


def _answers_paired(
    history: list[OpenAIMessage], callers: dict[str, list[int]]
) -> dict[int, list[int]]:
    """The tool messages that answer each assistant message: indexes, by the caller's index.

    `callers` says which assistant messages call each id, in order. The answer
    to a call must come after it and before the next message that calls the
    same id again, so that reused ids (some providers number calls per
    response) still pair with the right call.
    """
    answers_by_id: dict[str, list[int]] = {}
    for index, message in enumerate(history):
        if message.get("role") == "tool":
            answers_by_id.setdefault(str(message.get("tool_call_id")), []).append(index)
    claimed: dict[int, list[int]] = {}
    for call_id, caller_indexes in callers.items():
        answers = answers_by_id.get(call_id, [])
        window_ends = [*caller_indexes[1:], len(history)]
        for caller, window_end in zip(caller_indexes, window_ends, strict=True):
            first = bisect.bisect_right(answers, caller)
            if first < len(answers) and answers[first] < window_end:
                claimed.setdefault(caller, []).append(answers[first])
    return claimed


def _answers_after(
    history: list[OpenAIMessage], index: int, answer_indexes: list[int]
) -> list[OpenAIMessage]:
    """What follows the message at `index`: the answers to its calls, a missing one filled.

    Answers keep their stored order (the order the tools finished in), so that
    a valid history passes through unchanged.
    """
    message = history[index]
    called = call_ids(message)
    if not called:
        return []
    answers = [history[answer] for answer in answer_indexes]
    answered = {answer.get("tool_call_id") for answer in answers}
    names = {
        str(call.get("id")): str((call.get("function") or {}).get("name") or "")
        for call in message.get("tool_calls") or []
    }
    for call_id in called:
        if call_id not in answered:
            logger.info("Filled the missing answer to tool_call_id %s (interrupted).", call_id)
            result = interrupted_result(names.get(call_id, ""), tool_call_id=call_id)
            answers.append({"role": "tool", "tool_call_id": call_id, "content": result.content})
    return answers


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
    return head + body[_cut(head, body, max_messages=max_messages, max_chars=max_chars) :]


def _cut(
    head: list[OpenAIMessage],
    body: list[OpenAIMessage],
    *,
    max_messages: int | None,
    max_chars: int | None,
) -> int:
    """Where `body` (the history after its instructions, `head`) is cut for the budgets to hold."""
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
        fits_count = max_messages is None or len(head) + len(body) - cut <= max_messages
        fits_chars = max_chars is None or head_chars + suffix_chars[cut] <= max_chars
        if fits_count and fits_chars:
            return cut
    return keep_from


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


def call_ids(message: Mapping[str, Any]) -> list[str]:
    if message.get("role") != "assistant":
        return []
    return [str(call.get("id")) for call in message.get("tool_calls") or []]
