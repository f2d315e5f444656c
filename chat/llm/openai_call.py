"""One completion asked of an OpenAI-compatible server, read top to bottom in `Call`.

A call's life, in the order of `Call`'s methods: `run` refuses at once a
question with images to a model that refused them, and chooses streamed or
not (the provider's configuration, what the server taught); `_streamed` sends
one streamed request (`_stream_open`), reads its chunks and judges a stream
that fails (`_stream_broke`): cut mid-answer, it is asked again, after a
`StreamRestart`, from the same budget of LLM_MAX_RETRIES + 1 requests, so one
count bounds every request of a call (the SDK retries a failed request, with
its backoff and Retry-After, inside that budget; Celery never adds to it);
still writing at a deadline, its text ends there as the answer; with tools
and no usable answer, it is asked unstreamed (`_instead`, `_asked_unstreamed`);
a tool named in the text is asked for its call (`_tool_named`); `create` sends
each request, and learns what the server refuses (a parameter, a null
content, images) before asking again.

What it calls are helpers that return a verdict and never call back: the body
(chat/llm/request_body.py), the server's limits (chat/llm/limits.py), a
stream's chunks and failures (chat/llm/streamed.py, stream_read.py), the
answer read leniently (chat/llm/completion_read.py, lenient.py), the failure's
words (chat/llm/failures.py) and the watch (chat/llm/watch.py): every request
goes through its transport, which ends the call when its run stops wanting it
(the `stop` event) or a deadline passes (LLM_CALL_DEADLINE_S for the whole
call, LLM_ATTEMPT_DEADLINE_S for one request and its stream). A request asked
without streaming that times out is not asked again (`Unanswered`).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Generator, Iterator
from typing import Any, Protocol

import openai

from chat.llm.base import (
    ChatRequest,
    Completion,
    Done,
    ProviderError,
    StreamEvent,
    StreamRestart,
    TextDelta,
)
from chat.llm.completion_read import completion_read, stream_completion
from chat.llm.failures import (
    ended,
    error_message,
    error_object,
    failed,
    failure_reason,
)
from chat.llm.limits import (
    final_error,
    image_input_refused,
    images_asked,
    images_refusal,
    images_refused,
    images_sent,
    refusal_learned,
    server_limits,
    streaming_tools_refused,
)
from chat.llm.request_body import Known, request_body, requests_sent
from chat.llm.stream_read import StreamRead
from chat.llm.streamed import (
    CUT,
    StreamCut,
    StreamUnusable,
    bound_hint,
    chunks_read,
    still_writing,
    stream_broke,
    stream_checked,
)
from chat.llm.watch import (
    CallDeadline,
    Deadline,
    Interrupted,
    Stopped,
    Unanswered,
    Watch,
    retry_after_wait,
    watching,
)

logger = logging.getLogger(__name__)

NAMED = "the server named a tool in its text"
_NAMED_TOOL = re.compile(r"^functions\.(?P<name>[A-Za-z0-9_.-]{1,64}):$")


class Server(Protocol):
    """What a call needs of its provider (chat/llm/openai_provider.py's `OpenAIProvider`)."""

    name: str
    client: openai.OpenAI
    base_url: str
    max_attempts: int  # LLM_MAX_RETRIES + 1: the call's budget of requests
    timeout_s: float  # the read timeout: how long the server may be silent
    token_limit_param: str
    known: Known


class Call:
    """One model call: its requests, its budget of attempts, and what the server said."""

    def __init__(self, provider: Server, request: ChatRequest, watch: Watch) -> None:
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
        if not self.limits.images and images_asked(self.request.messages):
            # Refused before: not asked again (chat/llm/limits.py `images_refused`).
            raise ProviderError(images_refusal(self.model_id()), status=400, attempts=0)
        unstreamed = self._why_unstreamed()
        if unstreamed:
            self.notes.append(f"not streamed: {unstreamed}")
            yield from self.shown(self._tool_named(self._asked_unstreamed()))
            return
        while True:
            try:
                completion = yield from self._streamed()
            except StreamUnusable as exc:
                yield from self.shown(self._instead(exc))
                return
            if completion is not None:
                named = self._tool_named(completion)
                if named is not completion:
                    yield StreamRestart(attempt=self.attempts, reason=NAMED)
                    yield from self.shown(named)
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
            yield from self.shown(whole, done=False)
            return whole
        read = StreamRead()
        try:
            with chunks:
                yield from chunks_read(chunks, read, self.started)
            completion = stream_completion(self, read)
            if completion is None:
                raise StreamCut("the stream ended before the model said anything")
        except Stopped as exc:
            raise ended(exc, self.attempts) from exc
        except Deadline as exc:
            if read.first_token_ms is not None or read.reasoning:
                hint = bound_hint(self.request.max_tokens or self.provider.known.max_tokens, exc)
                self.notes.append(still_writing(read, exc, hint, self.attempts))
                written = stream_completion(self, read, finish_reason="length")
                assert written is not None  # it has text
                return written
            if isinstance(exc, CallDeadline):
                raise ended(exc, self.attempts) from exc
            yield from self._stream_broke(exc, read.first_token_ms)  # silent: asked again
            return None
        except Exception as exc:
            yield from self._stream_broke(exc, read.first_token_ms)
            return None
        if completion.tool_calls:
            self.limits.stream_tools_seen = True
        stream_checked(
            completion,
            spoke=read.spoke,
            null_content_sent=not read.spoke and self.null_content_sent(),  # asked only then
            tools=bool(self.request.tools),
        )
        return completion

    def _stream_open(self) -> Any:
        """The streamed request sent: its chunks, or None when it is to be sent again."""
        # Until this server has streamed a tool call, a streamed request with tools gets no
        # retry of its own: a failure is asked once without streaming instead.
        trying = bool(self.request.tools) and not self.limits.stream_tools_seen
        try:
            return self.create(stream=True, retries=0 if trying else self.retries_left())
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
                    and self.failures() < self.provider.max_attempts
                ):
                    # What the SDK would have retried: asked again streamed, as it would.
                    try:
                        retry_after_wait(self.watch, exc.response.headers)
                    except (Stopped, CallDeadline) as stopped:
                        raise ended(stopped, self.attempts) from exc
                    return None
            raise self.failed(exc) from exc

    def _stream_broke(self, exc: Exception, first_token_ms: int | None) -> Iterator[StreamEvent]:
        """A stream that broke: the failure is raised, or (returning) the request is sent again."""
        cut = stream_broke(
            exc,
            first_token_ms=first_token_ms,
            tools=bool(self.request.tools),
            attempts=self.attempts,
            last=self.failures() >= self.provider.max_attempts,
            timeout_s=self.provider.timeout_s,
        )
        # Asked again at once: the server answered a moment ago, only the stream broke.
        logger.warning(
            "model stream cut (attempt %d/%d): %s; asking again",
            self.attempts,
            self.provider.max_attempts,
            cut,
        )
        if first_token_ms is not None:
            yield StreamRestart(attempt=self.attempts + 1, reason=CUT)

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

    def _asked_unstreamed(self) -> Completion:
        try:
            response = self.create(stream=False, retries=self.retries_left())
        except openai.OpenAIError as exc:
            raise self.failed(exc) from exc
        kind = response.headers.get("content-type", "").partition(";")[0].strip()
        return completion_read(self, response, kind)

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

    def create(self, *, stream: bool, retries: int) -> Any:
        """Send the request (the SDK retries it); a parameter the server refuses is left out.

        Returns the SDK's stream of the server's chunks (JSON objects), or the HTTP
        response of an unstreamed request.
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
            self.watch.streamed = stream
            try:
                with watching(self.watch):
                    raw = client.chat.completions.with_raw_response.create(
                        model=self.request.model,
                        messages=[],
                        stream=stream,
                        extra_body=body.raw,
                        **body.arguments,
                    )
                    self.attempts += requests_sent(raw.http_response.request.headers)
                    if not stream:
                        return raw.http_response
                    # The SDK's stream of the response (its SSE reading, its errors), with
                    # each chunk the JSON object the server sent: its models cost 65 us a
                    # chunk with the GIL held (chat/llm/stream_read.py).
                    return openai.Stream(cast_to=object, response=raw.http_response, client=client)
            except openai.APIStatusError as exc:
                self.attempts += requests_sent(exc.request.headers)
                self._images_refused(exc)
                taught = refusal_learned(
                    self.limits,
                    self.provider.base_url,
                    self.request,
                    exc.status_code,
                    error_message(exc),
                    error_object(exc),
                    {**body.raw, **body.arguments},
                )
                if not taught:
                    raise
                self.notes.append(taught)
                self.learned += 1
                retries = self.retries_left()
            except openai.OpenAIError as exc:
                if isinstance(exc, openai.APIError | Unanswered):
                    self.attempts += requests_sent(exc.request.headers)
                raise

    def _images_refused(self, exc: openai.APIStatusError) -> None:
        """Raise the error of a model that refuses images, remembered, if the server said so."""
        words = error_message(exc)
        if not images_sent(self.request.messages) or not image_input_refused(
            exc.status_code, words
        ):
            return
        images_refused(self.provider.base_url, self.request.model, words)
        raise ProviderError(
            images_refusal(self.model_id(), f"HTTP {exc.status_code}: {words}"),
            status=exc.status_code,
            attempts=self.attempts,
        ) from exc

    def retries_left(self) -> int:
        """The SDK retries the next request may make, within the call's budget."""
        return max(0, self.provider.max_attempts - self.failures() - 1)

    def failures(self) -> int:
        """The requests sent that failed, not counting those that taught a limit."""
        return self.attempts - self.learned

    def null_content_sent(self) -> bool:
        """Whether the history holds an assistant's null content this server may refuse."""
        return not self.limits.content_text and any(
            m.get("role") == "assistant" and m.get("content") is None for m in self.request.messages
        )

    def model_id(self) -> str:
        """The model as toolchat names it: `<provider>/<model>`."""
        return f"{self.provider.name}/{self.request.model}"

    def shown(self, completion: Completion, *, done: bool = True) -> Iterator[StreamEvent]:
        """An answer that came whole: its text as one delta, then (unless not `done`) its end."""
        if completion.content:
            yield TextDelta(completion.content)
        if done:
            yield Done(completion)

    def failed(self, exc: openai.OpenAIError) -> Exception:
        return failed(exc, self.attempts, self.watch.said)
