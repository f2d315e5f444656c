"""One completion asked of an OpenAI-compatible server: its requests, retries and deadlines.

Its SDK clients come from chat/llm/openai_client.py, a stream's chunks are
read by chat/llm/stream_read.py, an answer becomes a Completion in
chat/llm/answer_read.py, and a request's body is built by
chat/llm/request_body.py; chat/llm/watch.py, the watch on a call, only
borrows the SDK's error class.

The SDK does the HTTP work: one client (one connection pool) per process and
endpoint, the retries of a failed request (LLM_MAX_RETRIES, with its backoff
and the server's Retry-After). A stream's text and tool-call deltas are joined
by chat/llm/stream_read.py's `Assembly`. This module adds what the SDK lacks: a stream
cut mid-answer is asked again, after a `StreamRestart`, from the same budget
of LLM_MAX_RETRIES + 1 requests, so that one count bounds every request of a
call. Celery never multiplies it: the turn engine does not retry a model call
that failed here.

The SDK's read timeout starts again at each byte, so a server that trickles
keep-alive comments could hold a call for ever. Every request therefore goes
through a watched transport (`WatchedTransport`): each request it sends and
each piece of body it reads checks the call's watch, which ends the call when
its run stops wanting it (a cancel, a take-over: the `stop` event) or when a
deadline passes: `LLM_CALL_DEADLINE_S` for the whole call, retries included,
and `LLM_ATTEMPT_DEADLINE_S` for one request and its stream (a late stream is
cut and asked again, within the call's deadline). A server that ignores
`stream=true` and answers one JSON completion is read as that completion.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import openai

from chat.llm.answer_read import completion_read, stream_completion
from chat.llm.base import (
    ChatRequest,
    Completion,
    Done,
    ProviderError,
    StreamEvent,
    StreamRestart,
    TextDelta,
)
from chat.llm.failures import (
    ended,
    error_message,
    error_object,
    failed,
    failure_message,
    failure_reason,
    stream_error,
)
from chat.llm.limits import (
    error_status,
    final_error,
    null_content_refused,
    parameter_refused,
    refused_parameter,
    server_limits,
    streaming_tools_refused,
)
from chat.llm.request_body import request_body, requests_sent
from chat.llm.stream_read import StreamRead, chunk_tidy, chunk_usage, stream_finish_reason
from chat.llm.watch import (
    AttemptDeadline,
    CallDeadline,
    Interrupted,
    Stopped,
    Watch,
    watching,
)

if TYPE_CHECKING:
    from chat.llm.openai_provider import OpenAIProvider


logger = logging.getLogger(__name__)

CUT = "stream cut mid-answer"
# A rate-limited request is asked again after the server's Retry-After when it is
# at most this long (as the SDK does), else after a short wait.
RETRY_AFTER_MAX_S = 60.0
RETRY_WAIT_S = 0.5
NAMED = "the server named a tool in its text"
_NAMED_TOOL = re.compile(r"^functions\.(?P<name>[A-Za-z0-9_.-]{1,64}):$")


class StreamCut(Exception):
    """The stream ended, or broke, before the model said it was finished."""


class StreamUnusable(Exception):
    """A streamed request that offered tools got no usable answer: it is asked unstreamed.

    `learned` when the failure is one a server that cannot stream tool calls
    gives (an error, a broken or empty stream), not a rate limit. `spent` when
    it may as well be a server that is down (a 5xx that does not say it
    refuses): asking again unstreamed is then one of the call's retries, not a
    free lesson; behind a gateway that retries each request itself, a free one
    would cost several more.
    """

    def __init__(self, why: str, *, learned: bool, spent: bool = False) -> None:
        super().__init__(why)
        self.learned = learned
        self.spent = spent


class Call:
    """One model call: its requests, its budget of attempts, and what the server said."""

    def __init__(self, provider: OpenAIProvider, request: ChatRequest, watch: Watch) -> None:
        self.provider = provider
        self.request = request
        self.watch = watch
        self.started = time.monotonic()
        self.attempts = 0
        # Requests whose answer taught a limit of the server (a refused parameter or null
        # content, a stream it cannot give, a tool it named): they spend no retry, which
        # is for failures. Each limit is learned once per call, so they are few.
        self.learned = 0
        self.notes: list[str] = []
        self.forced: dict[str, Any] | None = None  # a tool_choice naming one tool
        self.limits = server_limits(provider.base_url, request.model)

    def run(self) -> Iterator[StreamEvent]:
        unstreamed = self._why_unstreamed()
        if unstreamed:
            self.notes.append(f"not streamed: {unstreamed}")
            yield from self._shown(self._tool_named(self._asked_unstreamed()))
            return
        while True:
            try:
                completion = yield from self._streamed()
            except StreamUnusable as exc:
                yield from self._shown(self._instead(exc))
                return
            if completion is not None:
                named = self._tool_named(completion)
                if named is not completion:
                    yield StreamRestart(attempt=self.attempts, reason=NAMED)
                    yield from self._shown(named)
                    return
                yield Done(completion)
                return

    def _why_unstreamed(self) -> str:
        """Why this call is asked without streaming at once, or "" (it is streamed)."""
        if not self.provider.known.stream:
            return "the provider's configuration says stream: false"
        if self.request.tools and not self.provider.known.stream_tools:
            return "the provider's configuration says streamTools: false"
        if self.request.tools and not self.limits.stream_tools:
            return "this server cannot stream tool calls"
        return ""

    # --- requests -----------------------------------------------------------------------

    def _retries_left(self) -> int:
        return max(0, self.provider.max_attempts - self._failures() - 1)

    def _failures(self) -> int:
        """The requests sent that failed, not counting those that taught a limit."""
        return self.attempts - self.learned

    def _create(self, *, stream: bool, retries: int) -> Any:
        """Send the request (the SDK retries it); a parameter the server refuses is left out.

        Returns the SDK's stream, or the HTTP response of an unstreamed request.
        """
        while True:
            client = self.provider.client
            if retries != self.provider.max_attempts - 1:
                client = client.with_options(max_retries=retries)
            body = request_body(
                self.request,
                self.limits,
                stream=stream,
                token_limit=self.provider.token_limit_param,
                known=self.provider.known,
                forced=self.forced,
            )
            try:
                with watching(self.watch):
                    if stream:
                        chunks = client.chat.completions.create(
                            model=self.request.model,
                            messages=[],
                            stream=True,
                            extra_body=body.raw,
                            **body.arguments,
                        )
                        self.attempts += requests_sent(chunks.response.request.headers)
                        return chunks
                    raw = client.chat.completions.with_raw_response.create(
                        model=self.request.model,
                        messages=[],
                        stream=False,
                        extra_body=body.raw,
                        **body.arguments,
                    )
                    self.attempts += requests_sent(raw.http_response.request.headers)
                    return raw.http_response
            except openai.APIStatusError as exc:
                self.attempts += requests_sent(exc.request.headers)
                if not self.limits.content_text and null_content_refused(
                    error_message(exc), self.request.messages
                ):
                    # llama-cpp-python validates an assistant message's content as a string.
                    self.limits.content_text = True
                    logger.warning(
                        '%s (%s) refuses a null assistant content: sent as "" from now on',
                        self.provider.base_url,
                        self.request.model,
                    )
                    self.notes.append('null assistant content refused: sent as ""')
                    self.learned += 1
                    retries = self._retries_left()
                    continue
                refused = ""
                if exc.status_code in (400, 422):
                    refused = refused_parameter(
                        error_message(exc), error_object(exc), body.arguments
                    )
                if not refused:
                    raise
                older = parameter_refused(self.provider.base_url, self.request.model, refused)
                self.notes.append(
                    f"{refused} refused: " + (f"sent as {older}" if older else "left out")
                )
                self.learned += 1
                retries = self._retries_left()
            except openai.OpenAIError as exc:
                if isinstance(exc, openai.APIError):
                    self.attempts += requests_sent(exc.request.headers)
                raise

    def _streamed(self) -> Generator[StreamEvent, None, Completion | None]:
        """One streamed request: its completion, or None when it was cut and is asked again."""
        chunks = self._stream_open()
        if chunks is None:
            return None
        kind = chunks.response.headers.get("content-type", "").partition(";")[0].strip()
        if kind != "text/event-stream":
            # A server that ignored `stream=true`: one JSON completion, or not an answer.
            with chunks:
                whole = completion_read(self, chunks.response, kind)
            yield from self._shown(whole, done=False)
            return whole
        read = StreamRead()
        try:
            with chunks:
                yield from self._chunks_read(chunks, read)
            completion = stream_completion(
                self,
                read.state,
                read.finish_reason,
                read.first_token_ms,
                read.usage,
                read.reasoning,
            )
            if completion is None:
                raise StreamCut("the stream ended before the model said anything")
        except (Stopped, CallDeadline) as exc:
            raise ended(exc, self.attempts) from exc
        except Exception as exc:
            yield from self._stream_broke(exc, read.first_token_ms)
            return None
        return self._stream_checked(completion, spoke=read.spoke)

    def _stream_open(self) -> Any:
        """The streamed request sent: its chunks, or None when it is to be sent again."""
        # Until this server has streamed a tool call, a streamed request with tools gets no
        # retry of its own: a failure is asked once without streaming instead.
        trying = bool(self.request.tools) and not self.limits.stream_tools_seen
        try:
            return self._create(stream=True, retries=0 if trying else self._retries_left())
        except openai.OpenAIError as exc:
            if trying and not isinstance(exc, Interrupted):
                status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
                if status is None or status >= 500:
                    spent = isinstance(exc, openai.APIStatusError) and not final_error(
                        status, error_object(exc)
                    )
                    raise StreamUnusable(failure_reason(exc), learned=True, spent=spent) from exc
                if (
                    isinstance(exc, openai.APIStatusError)
                    and status in (408, 409, 429)
                    and self._failures() < self.provider.max_attempts
                ):
                    # What the SDK would have retried: asked again streamed, as it would.
                    self._wait_retry_after(exc)
                    return None
            raise self.failed(exc) from exc

    def _chunks_read(self, chunks: Any, read: StreamRead) -> Iterator[StreamEvent]:
        """Yield the text of the stream's chunks; `read` keeps the rest, as far as it got."""
        for chunk in chunks:
            if chunk.object and chunk.object != "chat.completion.chunk":
                continue  # not a chunk (Azure's content-filter notes); as .stream() does
            chunk_tidy(chunk, read)
            read.spoke = read.spoke or any(c.delta.role for c in chunk.choices)
            if read.first_token_ms is None and any(
                c.delta.content or c.delta.tool_calls for c in chunk.choices
            ):
                read.first_token_ms = int((time.monotonic() - self.started) * 1000)
            for text in read.state.add(chunk):
                yield TextDelta(text)
            read.finish_reason = stream_finish_reason(read.state) or read.finish_reason
            reported = chunk_usage(chunk)
            if reported != (None, None):
                read.usage = reported  # the last usage a chunk reports wins

    def _stream_broke(self, exc: Exception, first_token_ms: int | None) -> Iterator[StreamEvent]:
        """A stream that broke: the failure to raise, or (returning) the request is sent again."""
        said = stream_error(exc)
        if said is not None and final_error(None, said):
            raise ProviderError(
                failure_message(
                    "the server's error", str(said.get("message") or exc), self.attempts
                ),
                status=error_status(said),
                attempts=self.attempts,
            ) from exc
        if isinstance(exc, StreamCut | AttemptDeadline):
            cut = str(exc)
        elif said is not None:
            cut = f"the server reported an error mid-answer: {said.get('message') or exc}"
        else:
            cut = f"the stream broke mid-answer ({type(exc).__name__}: {exc})"
        if self.request.tools and first_token_ms is None and not isinstance(exc, AttemptDeadline):
            raise StreamUnusable(cut, learned=True) from exc
        if self._failures() >= self.provider.max_attempts:
            raise ProviderError(
                failure_message(CUT, cut, self.attempts), attempts=self.attempts
            ) from exc
        # Asked again at once: the server answered a moment ago, only the stream broke.
        logger.warning(
            "model stream cut (attempt %d/%d): %s; asking again",
            self.attempts,
            self.provider.max_attempts,
            cut,
        )
        if first_token_ms is not None:
            yield StreamRestart(attempt=self.attempts + 1, reason=CUT)

    def _stream_checked(self, completion: Completion, *, spoke: bool) -> Completion:
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
            self.limits.stream_tools_seen = True
        elif (completion.content or "").strip():
            pass
        elif not spoke and self._null_content_sent():
            # Not a lesson about tool calls: the null content may explain it.
            raise StreamUnusable("the streamed answer was empty", learned=False)
        elif self.request.tools:
            raise StreamUnusable("the streamed answer was empty", learned=True)
        return completion

    def _null_content_sent(self) -> bool:
        return not self.limits.content_text and any(
            m.get("role") == "assistant" and m.get("content") is None for m in self.request.messages
        )

    def _wait_retry_after(self, exc: openai.APIStatusError) -> None:
        """Wait as the SDK would before a retry: the server's Retry-After, if it is short."""
        headers = exc.response.headers
        wait = RETRY_WAIT_S
        try:
            if "retry-after-ms" in headers:
                wait = float(headers["retry-after-ms"]) / 1000
            elif "retry-after" in headers:
                wait = float(headers["retry-after"])
        except ValueError:
            pass
        if not 0 <= wait <= RETRY_AFTER_MAX_S:
            wait = RETRY_WAIT_S
        until = time.monotonic() + wait
        try:
            while (left := until - time.monotonic()) > 0:
                self.watch.check()
                time.sleep(min(left, 0.1))
        except (Stopped, CallDeadline) as stopped:
            raise ended(stopped, self.attempts) from exc

    def _instead(self, unusable: StreamUnusable) -> Completion:
        """The answer asked again without streaming, after a streamed request with tools failed."""
        why = str(unusable)
        logger.info("model stream with tools unusable (%s); asking without streaming", why)
        if not unusable.spent:
            self.learned += 1
        completion = self._asked_unstreamed()
        if unusable.learned and completion.tool_calls:
            streaming_tools_refused(self.provider.base_url, self.request.model, why)
        self.notes.append(f"asked again without streaming: {why}")
        completion.note = "; ".join(self.notes)
        return self._tool_named(completion)

    def _tool_named(self, completion: Completion) -> Completion:
        """The call of the tool a server named in its text instead of calling it, if it did.

        llama-cpp-python's `chatml-function-calling` first lets the model choose
        between a message and a tool; on the message branch its grammar allows
        only a tool's name, so the answer is the text `functions.NAME:`. Asked
        again for that tool (`tool_choice` naming it, unstreamed), the server
        writes the call's arguments. When that fails, the answer stays as it was.
        """
        match = _NAMED_TOOL.match((completion.content or "").strip())
        offered = {tool["function"]["name"] for tool in self.request.tools or []}
        if completion.tool_calls or match is None or match["name"] not in offered:
            return completion
        self.forced = {"type": "function", "function": {"name": match["name"]}}
        self.learned += 1  # the answer naming the tool taught us to ask for its call
        try:
            called = self._asked_unstreamed()
        except ProviderError:
            logger.warning("asking for the tool %s the server named failed", match["name"])
            return completion
        finally:
            self.forced = None
        if not called.tool_calls:
            return completion
        self.notes.append(f"{NAMED}: asked for its call")
        called.note = "; ".join(self.notes)
        return called

    def _asked_unstreamed(self) -> Completion:
        try:
            response = self._create(stream=False, retries=self._retries_left())
        except openai.OpenAIError as exc:
            raise self.failed(exc) from exc
        kind = response.headers.get("content-type", "").partition(";")[0].strip()
        return completion_read(self, response, kind)

    def _shown(self, completion: Completion, *, done: bool = True) -> Iterator[StreamEvent]:
        """An answer that came whole: its text as one delta, then (unless not `done`) its end."""
        if completion.content:
            yield TextDelta(completion.content)
        if done:
            yield Done(completion)

    def failed(self, exc: openai.OpenAIError) -> Exception:
        return failed(exc, self.attempts, self.watch.said)
