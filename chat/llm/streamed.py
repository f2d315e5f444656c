"""What a streamed answer's chunks say, and what a stream that fails means.

chat/llm/openai_call.py's `Call` sends a streamed request and decides what
comes next; these helpers take what it hands them and return (or raise) a
verdict, never calling back into the call. `chunks_read` yields a stream's
text and keeps the rest in a `StreamRead` (chat/llm/stream_read.py). A
stream that breaks or ends before the model finished is asked again from the
call's budget, unless `stream_broke` raises the failure; one still writing
when a deadline passes is not, and `still_writing` keeps its text as the
answer. One that offered tools and got no usable answer raises
`StreamUnusable` (`stream_checked`, `stream_broke`), and the call asks again
without streaming.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import openai

from chat.llm.base import Completion, ProviderError, StreamEvent, TextDelta
from chat.llm.failures import failure_message, stream_error
from chat.llm.lenient import Usage, usage_read
from chat.llm.limits import error_status, final_error
from chat.llm.stream_read import StreamRead, chunk_tidy, stream_finish_reason
from chat.llm.watch import AttemptDeadline, Deadline

logger = logging.getLogger(__name__)

CUT = "stream cut mid-answer"


class StreamCut(Exception):
    """The stream ended, or broke, before the model said it was finished."""


class StreamUnusable(Exception):
    """A streamed request that offered tools got no usable answer: it is asked unstreamed.

    `learned` when the failure is one a server that cannot stream tool calls
    gives (an error, a broken or empty stream), not a rate limit. `spent` when
    it may as well be a server that is down (no answer at all, or a 5xx that
    does not say it refuses): asking again unstreamed is then one of the call's retries, not a
    free lesson; behind a gateway that retries each request itself, a free one
    would cost several more.
    """

    def __init__(self, why: str, *, learned: bool, spent: bool = False) -> None:
        super().__init__(why)
        self.learned = learned
        self.spent = spent


def chunks_read(chunks: Any, read: StreamRead, started: float) -> Iterator[StreamEvent]:
    """Yield the text of the stream's chunks; `read` keeps the rest, as far as it got.

    `started` is the call's start (time.monotonic()), from which the first token's
    time is counted.
    """
    for chunk in chunks:
        if not isinstance(chunk, dict):
            continue  # not a JSON object: nothing a chunk would say
        kind = chunk.get("object")
        if kind and kind != "chat.completion.chunk":
            continue  # not a chunk (Azure's content-filter notes); as .stream() does
        chunk_tidy(chunk, read)
        deltas = [choice["delta"] for choice in chunk["choices"]]
        read.spoke = read.spoke or any(delta.get("role") for delta in deltas)
        if read.first_token_ms is None and any(
            delta.get("content") or delta.get("tool_calls") for delta in deltas
        ):
            read.first_token_ms = int((time.monotonic() - started) * 1000)
        for text in read.state.add(chunk):
            yield TextDelta(text)
        read.finish_reason = stream_finish_reason(read.state) or read.finish_reason
        reported = usage_read(chunk)  # Groq's in `x_groq.usage`
        if reported != Usage():
            read.usage = reported  # the last usage a chunk reports wins


def still_writing(read: StreamRead, exc: Deadline, hint: str, attempts: int) -> str:
    """A stream still writing when a deadline passed: the call's note, if its text is kept.

    The model was producing, not stalled: asked again, it would write as much
    again, so the call ends here whatever retries are left. Its text is kept
    as the answer with `finish_reason` "length", as a server's own token limit
    would end it; a tool call or reasoning cut off is no answer, and fails
    (raised here). `hint` says how to bound what a model writes (`bound_hint`).
    """
    answer = read.state.answer
    calls = answer.calls if answer is not None else []
    what = f"a call of {calls[-1].name or 'a tool'}" if calls else "its reasoning"
    written = answer.text if answer is not None and not calls else None
    kept = bool((written or "").strip())
    logger.warning(
        "model still writing after %g s (%s): %s",
        exc.seconds,
        exc.setting,
        "its text is kept as the answer" if kept else f"{what} cut off, the call fails",
    )
    if not kept:
        raise ProviderError(
            failure_message(
                "still writing",
                f"the model was still writing {what} after {exc.seconds:g} s ({exc.setting}) "
                f"and was not asked again: {hint}",
                attempts,
            ),
            attempts=attempts,
        ) from exc
    return (
        f"still writing after {exc.seconds:g} s ({exc.setting}): cut there, not asked again; {hint}"
    )


def bound_hint(sent: int | None, exc: Deadline) -> str:
    """What to set so that a model stops writing before the deadline (`sent`: the token limit)."""
    if sent:
        return f"a limit of {sent} tokens was sent: lower it, or raise {exc.setting}"
    return f"set LLM_MAX_TOKENS to bound what it writes, or raise {exc.setting}"


def stream_broke(
    exc: Exception,
    *,
    first_token_ms: int | None,
    tools: bool,
    attempts: int,
    last: bool,
    timeout_s: float,
) -> str:
    """A stream that broke: the failure raised, or (returned) why it is to be sent again.

    `last` when the call's budget of attempts is spent; `timeout_s` is LLM_TIMEOUT_S.
    """
    said = stream_error(exc)
    if said is not None and final_error(None, said):
        raise ProviderError(
            failure_message("the server's error", str(said.get("message") or exc), attempts),
            status=error_status(said),
            attempts=attempts,
        ) from exc
    if isinstance(exc, StreamCut | AttemptDeadline):
        cut = str(exc)
    elif isinstance(exc, openai.APITimeoutError):
        cut = f"the server went silent: no chunk for {timeout_s:g} s (LLM_TIMEOUT_S)"
    elif said is not None:
        cut = f"the server reported an error mid-answer: {said.get('message') or exc}"
    else:
        cut = f"the stream broke mid-answer ({type(exc).__name__}: {exc})"
    if tools and first_token_ms is None and not isinstance(exc, AttemptDeadline):
        raise StreamUnusable(cut, learned=True) from exc
    if last:
        raise ProviderError(failure_message(CUT, cut, attempts), attempts=attempts) from exc
    return cut


def stream_checked(
    completion: Completion, *, spoke: bool, null_content_sent: bool, tools: bool
) -> None:
    """Raise `StreamUnusable` for an empty streamed answer that may be a server's failure.

    An empty answer to a request with tools: LiteLLM relays a server's refusal
    to stream tool calls so. An answer in which no model spoke (no chunk with a
    `role`, only an end) to a history with a null assistant content not yet
    known to be refused (`null_content_sent`): LiteLLM leaves the null out,
    llama-cpp-python's chat template fails on it after the stream began, and
    LiteLLM relays that as such an answer; unstreamed, the failure is an error
    that names it. Either is asked once unstreamed before it counts as empty.
    """
    if completion.tool_calls or (completion.content or "").strip():
        return
    if not spoke and null_content_sent:
        # Not a lesson about tool calls: the null content may explain it.
        raise StreamUnusable("the streamed answer was empty", learned=False)
    if tools:
        raise StreamUnusable("the streamed answer was empty", learned=True)
