"""One completion asked of an OpenAI-compatible server: its requests, retries and deadlines.

Its SDK clients come from chat/llm/openai_client.py, a request's body is
built by chat/llm/request_body.py, a streamed request is read (and a stream
that fails judged) in chat/llm/streamed.py, an answer becomes a Completion in
chat/llm/answer_read.py; chat/llm/watch.py, the watch on a call, only
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
and `LLM_ATTEMPT_DEADLINE_S` for one request and its stream (a late stream
that wrote nothing is cut and asked again, within the call's deadline; one
still writing ends there, in chat/llm/streamed.py). A request asked without
streaming whose answer does not come within the read timeout is not asked
again (`Unanswered`): a model still writing is silent until it ends. A server
that ignores `stream=true` and answers one JSON completion is read as that
completion.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import openai

from chat.llm.answer_read import completion_read
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
)
from chat.llm.limits import (
    image_input_refused,
    images_asked,
    images_refusal,
    images_refused,
    images_sent,
    null_content_refused,
    parameter_refused,
    refused_parameter,
    server_limits,
    streaming_tools_refused,
)
from chat.llm.request_body import request_body, requests_sent
from chat.llm.streamed import StreamUnusable, streamed
from chat.llm.watch import (
    CallDeadline,
    Stopped,
    Unanswered,
    Watch,
    watching,
)

if TYPE_CHECKING:
    from chat.llm.openai_provider import OpenAIProvider


logger = logging.getLogger(__name__)

# A rate-limited request is asked again after the server's Retry-After when it is
# at most this long (as the SDK does), else after a short wait.
RETRY_AFTER_MAX_S = 60.0
RETRY_WAIT_S = 0.5
NAMED = "the server named a tool in its text"
_NAMED_TOOL = re.compile(r"^functions\.(?P<name>[A-Za-z0-9_.-]{1,64}):$")


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
                completion = yield from streamed(self)
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

    # --- requests (a streamed one is read in chat/llm/streamed.py) ------------------

    def retries_left(self) -> int:
        """The SDK retries the next request may make, within the call's budget."""
        return max(0, self.provider.max_attempts - self.failures() - 1)

    def failures(self) -> int:
        """The requests sent that failed, not counting those that taught a limit."""
        return self.attempts - self.learned

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
                    retries = self.retries_left()
                    continue
                refused = ""
                if exc.status_code in (400, 422):
                    refused = refused_parameter(
                        error_message(exc), error_object(exc), {**body.raw, **body.arguments}
                    )
                if not refused:
                    raise
                older = parameter_refused(self.provider.base_url, self.request.model, refused)
                self.notes.append(
                    f"{refused} refused: " + (f"sent as {older}" if older else "left out")
                )
                self.learned += 1
                retries = self.retries_left()
            except openai.OpenAIError as exc:
                if isinstance(exc, openai.APIError | Unanswered):
                    self.attempts += requests_sent(exc.request.headers)
                raise

    def model_id(self) -> str:
        """The model as toolchat names it: `<provider>/<model>`."""
        return f"{self.provider.name}/{self.request.model}"

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

    def null_content_sent(self) -> bool:
        """Whether the history holds an assistant's null content this server may refuse."""
        return not self.limits.content_text and any(
            m.get("role") == "assistant" and m.get("content") is None for m in self.request.messages
        )

    def wait_retry_after(self, exc: openai.APIStatusError) -> None:
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
            response = self.create(stream=False, retries=self.retries_left())
        except openai.OpenAIError as exc:
            raise self.failed(exc) from exc
        kind = response.headers.get("content-type", "").partition(";")[0].strip()
        return completion_read(self, response, kind)

    def shown(self, completion: Completion, *, done: bool = True) -> Iterator[StreamEvent]:
        """An answer that came whole: its text as one delta, then (unless not `done`) its end."""
        if completion.content:
            yield TextDelta(completion.content)
        if done:
            yield Done(completion)

    def failed(self, exc: openai.OpenAIError) -> Exception:
        return failed(exc, self.attempts, self.watch.said)
