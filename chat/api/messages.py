"""A conversation's messages: the history in OpenAI format, and posting a new message.

Posting answers in one of three ways:

- at once, 202, with the queued run and the stored user message;
- with `?wait=true`, once the run has ended (200, with the final assistant
  message), as soon as it waits for a person's decision (200, with the
  answer whose calls wait), or when the timeout has passed (202, as above);
- with `Accept: text/event-stream`, as the run's events while they happen.

The last two wait on the event loop (an async view), never in a thread.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.api import docs
from chat.api.base import (
    AsyncApiView,
    CursorPage,
    EventStreamNegotiation,
    accepts_event_stream,
    page_serializer,
    paginate,
)
from chat.api.run_data import run_data
from chat.api.serializers import MessageSerializer, RunSerializer, message_data
from chat.inputs import MessageInput, StrictInputSerializer
from chat.live.run_wait import run_end_wait
from chat.live.sse import sse_response
from chat.live.streams import run_event_stream
from chat.message_rate import MessageRateThrottle
from chat.models import ACTIVE_RUN_STATUSES, Run, RunStatus
from chat.selectors import (
    conversation_get,
    message_list_with_executions,
    run_final_message,
    run_shown,
    run_user_message,
    run_waiting_message,
)
from chat.services.runs import run_regenerate, run_start

logger = logging.getLogger(__name__)

TAG = ["messages"]
DEFAULT_WAIT_S = 120.0
MAX_WAIT_S = 600.0

User = AbstractBaseUser | AnonymousUser


class ListQuerySerializer(serializers.Serializer[Any]):
    include_superseded = serializers.BooleanField(
        default=False,
        help_text="Also the messages a regenerated answer or an edited question replaced.",
    )


class MessageListApi(APIView):
    """The conversation's history, oldest first, in OpenAI Chat Completions format."""

    class Pagination(CursorPage):
        ordering = "position"
        page_size = 100
        max_page_size = 1000

    @extend_schema(
        tags=TAG,
        operation_id="messages_list",
        summary="Read the history",
        description=(
            "Oldest first, 100 per page (`page_size` up to 1000). Each message is an OpenAI "
            "Chat Completions message (`role`, `content`, `tool_calls`, `tool_call_id`) plus "
            "toolchat's fields: `id`, `position`, `created_at`, `run_id`, `resource_id`, "
            "`latency_ms`, `model`, `usage`, `finish_reason`, and for tool messages `name` "
            "and `tool_execution_id` (the audit row), for assistant messages `html` (the "
            "content as sanitized Markdown HTML) and `suggestions`, and `resource` (a card's "
            "kind and title) with a `resource_id`. Messages replaced by a regenerated answer or "
            "an edited question are left out unless `include_superseded=true`."
        ),
        parameters=[docs.path_id("conversation_id", "The conversation."), ListQuerySerializer],
        responses={
            200: page_serializer("MessagePageSerializer", MessageSerializer),
            **docs.errors(400, 404),
        },
        examples=[
            docs.example(
                "A turn with a tool call",
                {
                    "next": None,
                    "previous": None,
                    "results": [
                        docs.USER_MESSAGE,
                        docs.TOOL_CALL_MESSAGE,
                        docs.TOOL_MESSAGE,
                        docs.ANSWER_MESSAGE,
                    ],
                },
            )
        ],
    )
    def get(self, request: Request, conversation_id: uuid.UUID) -> Response:
        """One page of messages (one query for the page, whatever its size)."""
        conversation = conversation_get(conversation_id=conversation_id, user=request.user)
        query = ListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return paginate(
            self.Pagination(),
            message_list_with_executions(
                conversation=conversation,
                include_superseded=query.validated_data["include_superseded"],
            ),
            request,
            self,
            lambda page: [message_data(message) for message in page],
        )


class MessageCreateApi(AsyncApiView):
    """Post a user message: it starts a run."""

    throttle_classes = [MessageRateThrottle]
    throttle_scope = "messages"
    content_negotiation_class = EventStreamNegotiation

    class InputSerializer(MessageInput):
        """The message (the WebSocket's post takes the same, chat/inputs.py)."""

    class QuerySerializer(serializers.Serializer[Any]):
        wait = serializers.BooleanField(
            default=False,
            help_text="Answer once the run has ended or waits for an approval "
            "(or the timeout passed).",
        )
        timeout = serializers.FloatField(
            default=DEFAULT_WAIT_S,
            min_value=0,
            max_value=MAX_WAIT_S,
            help_text="With wait: the longest wait in seconds (default 120, at most 600).",
        )

    class OutputSerializer(serializers.Serializer[Any]):
        run = RunSerializer()
        message = MessageSerializer(
            allow_null=True,
            help_text="202: the stored user message. 200: the final assistant message "
            "(null if the run failed or was cancelled), or, while the run awaits approval, "
            "the assistant message whose tool calls wait.",
        )

    def post_first(self, request: Request, conversation_id: uuid.UUID) -> _Posted:
        """On the request's thread, after authentication: the checks, then the run started."""
        conversation = conversation_get(conversation_id=conversation_id, user=request.user)
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        begun = time.monotonic()
        run = run_start(
            conversation=conversation,
            content=body.validated_data["content"],
            replaces=body.validated_data.get("replaces"),
            images=body.validated_data.get("images") or (),
        )
        return _Posted(run, query.validated_data["wait"], query.validated_data["timeout"], begun)

    @extend_schema(
        tags=TAG,
        operation_id="messages_create",
        summary="Post a message",
        description=(
            "Stores the user message and a queued run in one transaction and answers 202 at "
            "once. With `?wait=true`, answers 200 when the run has ended, with the final "
            "assistant message, or as soon as it waits for an approval (`run.status` "
            "`awaiting_approval`, the waiting call in `run.tool_executions`, the message "
            "whose tool calls wait), or 202 as usual if `timeout` passes first. With "
            "`Accept: text/event-stream`, streams the run's events as Server-Sent Events "
            "(`id:` the seq, `event:` the type, `data:` the envelope) and ends after the run's "
            "last event. A conversation runs one message at a time: 409 while a run is active."
        ),
        parameters=[docs.path_id("conversation_id", "The conversation."), QuerySerializer],
        request=InputSerializer,
        responses={
            202: OutputSerializer,
            200: OutputSerializer,
            (200, "text/event-stream"): OpenApiResponse(
                OpenApiTypes.STR, description="The run's events (Accept: text/event-stream)."
            ),
            **docs.errors(400, 403, 404, 409, 415, 429),
        },
        examples=[
            docs.example("Post", {"content": "What is 12*7?"}, request=True),
            docs.example(
                "Accepted", {"run": docs.QUEUED_RUN, "message": docs.USER_MESSAGE}, status=202
            ),
            docs.example("Waited (?wait=true)", {"run": docs.RUN, "message": docs.ANSWER_MESSAGE}),
        ],
    )
    async def post(
        self, request: Request, first: _Posted, conversation_id: uuid.UUID
    ) -> HttpResponseBase:
        """Answer at once, after the run, or as its event stream."""
        run = first.run
        if accepts_event_stream(request):
            return sse_response(run_event_stream(run=run))
        if first.wait:
            await _wait_for_end(run, first.timeout, first.begun)
        data, ended = await sync_to_async(_answer)(run, request.user, final=first.wait)
        return Response(data, status=status.HTTP_200_OK if ended else status.HTTP_202_ACCEPTED)


@dataclasses.dataclass(frozen=True)
class _Posted:
    """A post's run, and how long its request waits for the end."""

    run: Run
    wait: bool
    timeout: float
    begun: float  # a time.monotonic() from before the run was dispatched


async def _wait_for_end(run: Run, timeout: float, begun: float) -> None:
    """Wait for the run's end, or until `timeout` seconds have passed."""
    try:
        await run_end_wait(run=run, timeout=timeout, begun=begun)
    except Exception:
        # The wait is a convenience and the run goes on regardless: rather than a
        # 500, answer the run as it stands (202 while it is still going).
        logger.exception("waiting for the end of run %s failed", run.pk)


def _answer(run: Run, user: User, *, final: bool) -> tuple[dict[str, Any], bool]:
    """The run now, with its final answer if `final` and it has ended, else the user's message.

    A waited run that stops for a person's decision is answered too (200), with
    the answer whose calls wait: nothing moves until someone decides.

    A post that does not wait is answered 202 with its question, as documented,
    even when its run was quick enough to end before the answer was read.
    """
    shown = run_shown(run_id=run.pk, user=user)
    fresh = shown.run
    paused = final and fresh.status == RunStatus.AWAITING_APPROVAL
    ended = final and fresh.status not in ACTIVE_RUN_STATUSES
    if paused:
        message = run_waiting_message(run=fresh)
    else:
        message = run_final_message(run=fresh) if ended else run_user_message(run=fresh)
    return {
        "run": run_data(fresh, shown.calls, shown.executions),
        "message": message_data(message) if message is not None else None,
    }, ended or paused


class RegenerateApi(APIView):
    """Answer the last user message again."""

    throttle_classes = [MessageRateThrottle]
    throttle_scope = "messages"

    class InputSerializer(StrictInputSerializer):
        """Nothing: an empty body or `{}` (any field is an error, not ignored)."""

    class OutputSerializer(serializers.Serializer[Any]):
        run = RunSerializer()
        message = MessageSerializer(help_text="The user message answered again.")

    @extend_schema(
        tags=TAG,
        operation_id="messages_regenerate",
        summary="Regenerate the last answer",
        description=(
            "Starts a new run on the conversation's last user message. The previous answer "
            "(its assistant and tool messages) is superseded: kept in the record and the "
            "audit, left out of the history a model or the message list sees. 409 while a "
            "run is active or when there is no user message."
        ),
        parameters=[docs.path_id("conversation_id", "The conversation.")],
        request=InputSerializer,
        responses={202: OutputSerializer, **docs.errors(400, 403, 404, 409, 415, 429)},
        examples=[
            docs.example("Regenerate (or no body at all)", {}, request=True),
            docs.example(
                "Accepted", {"run": docs.QUEUED_RUN, "message": docs.USER_MESSAGE}, status=202
            ),
        ],
    )
    def post(self, request: Request, conversation_id: uuid.UUID) -> Response:
        """Queue the new run; answer 202 with it and the question."""
        conversation = conversation_get(conversation_id=conversation_id, user=request.user)
        self.InputSerializer(data=request.data).is_valid(raise_exception=True)
        run = run_regenerate(conversation=conversation)
        data, _ = _answer(run, request.user, final=False)
        return Response(data, status=status.HTTP_202_ACCEPTED)
