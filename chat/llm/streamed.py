"""A model call's streamed request: its chunks read, and what a stream that fails means.

chat/llm/openai_call.py's `Call` sends the request (`Call.create`) and keeps
the call's budget of attempts; this module reads what comes back. A stream's
chunks are joined by chat/llm/stream_read.py and end as a Completion
(chat/llm/answer_read.py). A stream that breaks or ends before the model
finished is asked again from the call's budget (a `StreamRestart` tells the
client to start its text over); one still writing when a deadline passes is
not, and its text ends there as the answer. One that offered tools and got
no usable answer raises `StreamUnusable`, and the call asks again without
streaming. A server that ignored `stream=true` is read as the one completion
it sent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import openai

from chat.llm.answer_read import completion_read, stream_completion
from chat.llm.base import (
    Completion,
    ProviderError,
    StreamEvent,
    StreamRestart,
    TextDelta,
)
from chat.llm.failures import ended, error_object, failure_message, failure_reason, stream_error
from chat.llm.lenient import Usage, usage_read
from chat.llm.limits import error_status, final_error
from chat.llm.stream_read import StreamRead, chunk_tidy, stream_finish_reason
from chat.llm.watch import AttemptDeadline, CallDeadline, Deadline, Interrupted, Stopped

if TYPE_CHECKING:
    from chat.llm.openai_call import Call


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


def streamed(call: Call) -> Generator[StreamEvent, None, Completion | None]:
    """One streamed request: its completion, or None when it was cut and is asked again."""
    chunks = _stream_open(call)
    if chunks is None:
        return None
    kind = chunks.response.headers.get("content-type", "").partition(";")[0].strip()
    if kind != "text/event-stream":
        # A server that ignored `stream=true`: one JSON completion, or not an answer.
        with chunks:
            whole = completion_read(call, chunks.response, kind)
        yield from call.shown(whole, done=False)
        return whole
    read = StreamRead()
    try:
        with chunks:
            yield from _chunks_read(call, chunks, read)
        completion = stream_completion(
            call,
            read.state,
            read.finish_reason,
            read.first_token_ms,
            read.usage,
            read.reasoning,
            read.logprobs,
        )
        if completion is None:
            raise StreamCut("the stream ended before the model said anything")
    except Stopped as exc:
        raise ended(exc, call.attempts) from exc
    except Deadline as exc:
        if read.first_token_ms is not None or read.reasoning:
            return _still_writing(call, read, exc)
        if isinstance(exc, CallDeadline):
            raise ended(exc, call.attempts) from exc
        yield from _stream_broke(call, exc, read.first_token_ms)  # silent: asked again
        return None
    except Exception as exc:
        yield from _stream_broke(call, exc, read.first_token_ms)
        return None
    return _stream_checked(call, completion, spoke=read.spoke)


def _still_writing(call: Call, read: StreamRead, exc: Deadline) -> Completion:
    """A stream still writing when a deadline passed: its text, as an answer cut for length.

    The model was producing, not stalled: asked again, it would write as much
    again, so the call ends here whatever retries are left. Its text is kept
    as the answer with `finish_reason` "length", as a server's own token limit
    would end it; a tool call or reasoning cut off is no answer, and fails.
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
                f"and was not asked again: {_bound_hint(call, exc)}",
                call.attempts,
            ),
            attempts=call.attempts,
        ) from exc
    call.notes.append(
        f"still writing after {exc.seconds:g} s ({exc.setting}): cut there, not asked "
        f"again; {_bound_hint(call, exc)}"
    )
    completion = stream_completion(
        call, read.state, "length", read.first_token_ms, read.usage, read.reasoning, read.logprobs
    )
    assert completion is not None  # it has text
    return completion


def _bound_hint(call: Call, exc: Deadline) -> str:
    """What to set so that a model stops writing before the deadline."""
    sent = call.request.max_tokens or call.provider.known.max_tokens
    if sent:
        return f"a limit of {sent} tokens was sent: lower it, or raise {exc.setting}"
    return f"set LLM_MAX_TOKENS to bound what it writes, or raise {exc.setting}"


def _stream_open(call: Call) -> Any:
    """The streamed request sent: its chunks, or None when it is to be sent again."""
    # Until this server has streamed a tool call, a streamed request with tools gets no
    # retry of its own: a failure is asked once without streaming instead.
    trying = bool(call.request.tools) and not call.limits.stream_tools_seen
    try:
        return call.create(stream=True, retries=0 if trying else call.retries_left())
    except openai.OpenAIError as exc:
        if trying and not isinstance(exc, Interrupted):
            status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
            if status is None or status >= 500:
                # No answer at all (nothing listening, a timeout) teaches nothing about
                # streaming: asking again is one of the retries LLM_MAX_RETRIES allows.
                spent = status is None or (
                    isinstance(exc, openai.APIStatusError)
                    and not final_error(status, error_object(exc))
                )
                raise StreamUnusable(failure_reason(exc), learned=True, spent=spent) from exc
            if (
                isinstance(exc, openai.APIStatusError)
                and status in (408, 409, 429)
                and call.failures() < call.provider.max_attempts
            ):
                # What the SDK would have retried: asked again streamed, as it would.
                call.wait_retry_after(exc)
                return None
        raise call.failed(exc) from exc


def _chunks_read(call: Call, chunks: Any, read: StreamRead) -> Iterator[StreamEvent]:
    """Yield the text of the stream's chunks; `read` keeps the rest, as far as it got."""
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
            read.first_token_ms = int((time.monotonic() - call.started) * 1000)
        for text in read.state.add(chunk):
            yield TextDelta(text)
        read.finish_reason = stream_finish_reason(read.state) or read.finish_reason
        reported = usage_read(chunk)  # Groq's in `x_groq.usage`
        if reported != Usage():
            read.usage = reported  # the last usage a chunk reports wins


def _stream_broke(call: Call, exc: Exception, first_token_ms: int | None) -> Iterator[StreamEvent]:
    """A stream that broke: the failure to raise, or (returning) the request is sent again."""
    said = stream_error(exc)
    if said is not None and final_error(None, said):
        raise ProviderError(
            failure_message("the server's error", str(said.get("message") or exc), call.attempts),
            status=error_status(said),
            attempts=call.attempts,
        ) from exc
    if isinstance(exc, StreamCut | AttemptDeadline):
        cut = str(exc)
    elif isinstance(exc, openai.APITimeoutError):
        cut = f"the server went silent: no chunk for {call.provider.timeout_s:g} s (LLM_TIMEOUT_S)"
    elif said is not None:
        cut = f"the server reported an error mid-answer: {said.get('message') or exc}"
    else:
        cut = f"the stream broke mid-answer ({type(exc).__name__}: {exc})"
    if call.request.tools and first_token_ms is None and not isinstance(exc, AttemptDeadline):
        raise StreamUnusable(cut, learned=True) from exc
    if call.failures() >= call.provider.max_attempts:
        raise ProviderError(
            failure_message(CUT, cut, call.attempts), attempts=call.attempts
        ) from exc
    # Asked again at once: the server answered a moment ago, only the stream broke.
    logger.warning(
        "model stream cut (attempt %d/%d): %s; asking again",
        call.attempts,
        call.provider.max_attempts,
        cut,
    )
    if first_token_ms is not None:
        yield StreamRestart(attempt=call.attempts + 1, reason=CUT)


def _stream_checked(call: Call, completion: Completion, *, spoke: bool) -> Completion:
    """A whole streamed answer, unless it is an empty one that may be a server's failure.

    An empty answer to a request with tools: LiteLLM relays a server's refusal
    to stream tool calls so. An answer in which no model spoke (no chunk with a
    `role`, only an end) to a history with a null assistant content not yet
    known to be refused: LiteLLM leaves the null out, llama-cpp-python's chat
    template fails on it after the stream began, and LiteLLM relays that as
    such an answer; unstreamed, the failure is an error that names it. Either
    is asked once unstreamed before it counts as empty.
    """
    if completion.tool_calls:
        call.limits.stream_tools_seen = True
    elif (completion.content or "").strip():
        pass
    elif not spoke and call.null_content_sent():
        # Not a lesson about tool calls: the null content may explain it.
        raise StreamUnusable("the streamed answer was empty", learned=False)
    elif call.request.tools:
        raise StreamUnusable("the streamed answer was empty", learned=True)
    return completion
