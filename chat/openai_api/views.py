"""The OpenAI-compatible endpoints: GET /v1/models, GET /v1/models/{id}, POST /v1/chat/completions.

Authenticated by the REST API's tokens as `Authorization: Bearer <token>`;
every error, whatever raised it, is OpenAI's error object with OpenAI's
status codes (the REST API's own handler decides the status, this module the
shape). A completion is a stored, audited run (chat/openai_api/threads.py maps
the request onto a conversation); the view waits for it on the event loop,
never in a thread, streaming its text as `chat.completion.chunk`s when asked.
While tools run, a stream carries SSE comment lines (`: toolchat ...`), which
every client skips, so that proxies keep the connection open.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.authentication import TokenAuthentication
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.api.base import AsyncApiView
from chat.api.errors import exception_handler
from chat.live.run_wait import run_end_wait
from chat.live.sse import with_keepalive
from chat.live.streams import run_event_stream
from chat.llm.endpoints import model_choices
from chat.message_rate import MessageRateThrottle
from chat.models import Run
from chat.openai_api import docs
from chat.openai_api.answers import (
    CLIENT_PREFIX,
    ModelNotFound,
    Outcome,
    chunk,
    completion_body,
    error_object,
    request_read,
    run_outcome,
    sse_data,
)
from chat.openai_api.threads import ClientMessage, messages_read, thread_failed, thread_saw
from chat.openai_api.turns import Started, turn_start

logger = logging.getLogger(__name__)

TAG = ["openai"]
# How long a request waits for its run (a stream waits as long as the run goes on).
WAIT_S = 600.0
KEEPALIVE_S = 10.0
WAITING_EVENTS = frozenset({"tool_call.approval_requested"})
TERMINAL = frozenset({"run.completed", "run.failed", "run.cancelled"})
PROGRESS = frozenset({"tool_call.started", "tool_call.completed", "tool.progress"})


class BearerAuthentication(TokenAuthentication):
    """The REST API's tokens, sent as OpenAI clients send a key: `Authorization: Bearer <key>`."""

    keyword = "Bearer"


class OpenAIView(APIView):
    """An endpoint of the OpenAI-compatible surface: Bearer tokens, OpenAI's error object."""

    authentication_classes = [BearerAuthentication, TokenAuthentication]

    def handle_exception(self, exc: Exception) -> Response:
        """The REST API's status for the error, in OpenAI's shape."""
        response = exception_handler(exc, {"view": self, "request": self.request})
        if response is None:
            logger.exception("OpenAI-compatible request failed", exc_info=exc)
            return Response(
                {"error": error_object(500, "Internal error.", code="internal_error")},
                status=status.HTTP_500_INTERNAL_SERVER_ERROR,
            )
        body = response.data or {}
        code = body.get("code")
        if response.status_code == status.HTTP_401_UNAUTHORIZED:
            code = "invalid_api_key"
            response["WWW-Authenticate"] = 'Bearer realm="api"'
        response.data = {
            "error": error_object(
                response.status_code,
                body.get("message", ""),
                code=code,
                param=body.get("field"),
            )
        }
        return response


def _model_object(model_id: str, provider: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": provider}


class ModelListView(OpenAIView):
    """The models the token's user may choose."""

    @extend_schema(
        tags=TAG,
        operation_id="openai_models_list",
        summary="List models (OpenAI shape)",
        description="The models of `GET /api/v1/models/`, as OpenAI's `GET /v1/models` lists.",
        responses={200: OpenApiTypes.OBJECT, **docs.errors()},
        examples=[docs.example("Models", {"object": "list", "data": [docs.MODEL]})],
    )
    def get(self, request: Request) -> Response:
        """Every model offered."""
        data = [_model_object(c.id, c.provider) for c in model_choices()]
        return Response({"object": "list", "data": data})


class ModelDetailView(OpenAIView):
    """One model."""

    @extend_schema(
        tags=TAG,
        operation_id="openai_models_retrieve",
        summary="Retrieve a model (OpenAI shape)",
        parameters=[
            OpenApiParameter("model_id", str, OpenApiParameter.PATH, description="The model's id.")
        ],
        responses={200: OpenApiTypes.OBJECT, **docs.errors(404)},
        examples=[docs.example("A model", docs.MODEL)],
    )
    def get(self, request: Request, model_id: str) -> Response:
        """The model, or 404 `model_not_found`; `openai/<id>` names it too (`v1_model`)."""
        for choice in model_choices():
            if model_id in (choice.id, f"{CLIENT_PREFIX}/{choice.id}"):
                return Response(_model_object(model_id, choice.provider))
        raise ModelNotFound(f"The model {model_id!r} does not exist.", field="model")


class ChatCompletionView(OpenAIView, AsyncApiView):
    """A completion: one stored, audited toolchat turn."""

    throttle_classes = [MessageRateThrottle]
    throttle_scope = "messages"

    def post_first(self, request: Request) -> Started:
        """On the request's thread, after authentication: the request read, the turn started."""
        return _start(request.user, request.data, request.META)

    @extend_schema(
        tags=TAG,
        operation_id="openai_chat_completions",
        summary="Create a chat completion (OpenAI shape)",
        description=(
            "OpenAI's Chat Completions, as a toolchat turn: toolchat's own tools run on the "
            "server; `tools` in the request are the client's, returned as `tool_calls`. A "
            "request whose messages begin with a conversation's history continues it. "
            "The run's id is in the `X-Toolchat-Run-Id` header. docs/openai-api.md."
        ),
        request=OpenApiTypes.OBJECT,
        responses={
            (200, "application/json"): OpenApiResponse(
                OpenApiTypes.OBJECT, description="`chat.completion`."
            ),
            (200, "text/event-stream"): OpenApiResponse(
                OpenApiTypes.STR,
                description="With `stream: true`: `chat.completion.chunk`s, then `[DONE]`.",
            ),
            **docs.errors(400, 404, 409, 429, 502),
        },
        examples=[
            docs.example("A question", docs.REQUEST, request=True),
            docs.example("The answer", docs.COMPLETION),
        ],
    )
    async def post(self, request: Request, started: Started) -> Any:
        """Answer when the turn ends, or stream it."""
        headers = turn_headers(started)
        if started.request.stream:
            return sse_response(_stream(started), headers)
        await run_end_wait(run=started.run, timeout=WAIT_S, begun=started.begun)
        outcome = await sync_to_async(_answered)(started)
        if outcome.error is not None:
            return Response({"error": outcome.error}, status=outcome.status, headers=headers)
        body = completion_body(started.run, started.request.model, outcome)
        return Response(body, headers=headers)


def turn_headers(started: Started) -> dict[str, str]:
    """The headers that name a /v1 answer's run and conversation."""
    return {
        "X-Toolchat-Run-Id": str(started.run.pk),
        "X-Toolchat-Conversation-Id": str(started.conversation.pk),
    }


def sse_response(stream: AsyncIterator[str], headers: dict[str, str]) -> StreamingHttpResponse:
    """A stream of SSE lines, uncached and unbuffered by proxies."""
    response = StreamingHttpResponse(stream, content_type="text/event-stream", headers=headers)
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


def unanswered(started: Started, outcome: Outcome) -> bool:
    """Whether the outcome is an error; one of a turn that ended is what its client saw.

    On the request's thread, in the hand-off that read the outcome.
    """
    if outcome.error is None:
        return False
    if outcome.status != status.HTTP_504_GATEWAY_TIMEOUT:  # ended, unanswered
        thread_failed(started.conversation, started.messages)
    return True


def _answered(started: Started) -> Outcome:
    """The outcome of a turn that is not streamed, and what its client is sent remembered.

    In one hand-off to the request's thread after the wait, where the outcome,
    `unanswered`'s record of a failed turn and `_saw` took three (every hop
    costs the event loop a few hundred microseconds of CPU under load:
    docs/gateway.md, round fifteen).
    """
    outcome = run_outcome(started.run.pk)
    if not unanswered(started, outcome):
        _saw(started, outcome, outcome.content)
    return outcome


def _stream_ended(started: Started, text: StreamedText) -> tuple[Outcome, str]:
    """At a stream's end, in one hand-off: the outcome, what of its text the stream has not
    carried (taken as sent), and what the client saw remembered (or its failed turn).

    Remembered as the stream's last chunks go out, as an answer not streamed is
    remembered before it is sent (before, a second hand-off after `[DONE]`).
    """
    outcome = run_outcome(started.run.pk)
    if unanswered(started, outcome):
        return outcome, ""
    piece = text.unsent(outcome)
    _saw(started, outcome, "".join(text.parts) or None)
    return outcome, piece


def _start(user: Any, body: Any, meta: dict[str, Any]) -> Started:
    """Read the request and start its turn."""
    request = request_read(body, meta)
    return turn_start(user, request, messages_read(request.messages), meta)


def _saw(started: Started, outcome: Outcome, content: str | None) -> None:
    """Remember what the client saw: its messages and the answer it was sent."""
    calls = tuple(
        (c["id"], c["function"]["name"], c["function"]["arguments"]) for c in outcome.tool_calls
    )
    answer = ClientMessage("assistant", content if content or not calls else None, calls)
    thread_saw(started.conversation, [*started.messages, answer])


async def run_events(run: Run, after: int = 0) -> AsyncIterator[dict[str, Any]]:
    """The run's events (after the cursor `after`) until it ends or waits for a person."""
    async for envelope in run_event_stream(run=run, after=after):
        yield envelope
        if envelope["type"] in TERMINAL or envelope["type"] in WAITING_EVENTS:
            return


async def _stream(started: Started) -> AsyncIterator[str]:
    """The run as `chat.completion.chunk`s: its text as it comes, then the outcome, then [DONE]."""
    run, model = started.run, started.request.model
    yield chunk(run, model, {"role": "assistant", "content": ""})
    text = StreamedText()
    async for item in with_keepalive(run_events(run), KEEPALIVE_S):
        if item is None:
            yield ": toolchat keep-alive\n\n"
        elif item["type"] == "message.delta":
            piece = text.add(item["data"])
            if piece:
                yield chunk(run, model, {"content": piece})
        elif item["type"] in PROGRESS:
            yield f": toolchat {item['type']} {item['data'].get('name', '')}\n\n"
    outcome, piece = await sync_to_async(_stream_ended)(started, text)
    if outcome.error is not None:
        yield sse_data({"error": outcome.error})
        yield "data: [DONE]\n\n"
        return
    if piece:
        yield chunk(run, model, {"content": piece})
    if outcome.tool_calls:
        calls = [{"index": i, **call} for i, call in enumerate(outcome.tool_calls)]
        yield chunk(run, model, {"tool_calls": calls})
    yield chunk(run, model, {}, outcome.finish_reason, logprobs=outcome.logprobs)
    if started.request.include_usage:
        yield chunk(run, model, None, usage=outcome.usage)
    yield "data: [DONE]\n\n"


class StreamedText:
    """The text a stream sent: each answer's deltas, a retried answer's repeat skipped."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.message_id: str | None = None
        self.sent_here = 0  # characters of the current answer sent
        self.skip = 0  # characters of a restarted answer already sent

    @property
    def sent(self) -> bool:
        return bool(self.parts)

    def unsent(self, outcome: Outcome) -> str:
        """What of the outcome's text the stream has not carried (and now takes as sent).

        A run that waits for an approval says so after whatever streamed; an answer
        that never streamed (a server's whole answer) is sent whole.
        """
        if outcome.waiting:
            piece = ("\n\n" if self.sent else "") + (outcome.content or "")
        elif not self.sent and not outcome.tool_calls and outcome.content:
            piece = outcome.content
        else:
            return ""
        self.parts.append(piece)
        return piece

    def add(self, data: dict[str, Any]) -> str:
        piece = str(data.get("text") or "")
        if data.get("message_id") != self.message_id:
            self.message_id, self.sent_here, self.skip = data.get("message_id"), 0, 0
            if self.parts and piece:
                piece = "\n\n" + piece
        if data.get("reset"):
            self.skip, self.sent_here = self.sent_here, 0
        if self.skip:
            cut = min(self.skip, len(piece))
            piece, self.skip = piece[cut:], self.skip - cut
        self.sent_here += len(piece)
        if piece:
            self.parts.append(piece)
        return piece


def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Any other path under /v1/: OpenAI's 404, not an HTML page."""
    return JsonResponse(
        {"error": error_object(404, "No such endpoint.", code="unknown_url")}, status=404
    )
