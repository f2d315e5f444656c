"""The Responses API: POST /v1/responses, GET and DELETE /v1/responses/{id}.

A response is a stored, audited toolchat turn, started as a Chat Completions
request's is (chat/openai_api/turns.py) from the request read by
chat/openai_api/response_input.py, and shown as the resource
chat/openai_api/response_output.py builds from the run. Authentication, the
message budget and the error object are the Chat Completions endpoint's.
A request that continues `previous_response_id` is the next turn of that
response's conversation, one that names a `conversation` (chat/openai_api/
conversations.py) the next turn of that one; one without either finds its conversation as a Chat
Completions request does, by the history it sends.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from chat.api.base import AsyncApiView
from chat.exceptions import Conflict, InvalidInput
from chat.live.run_wait import run_end_wait
from chat.message_rate import MessageRateThrottle
from chat.models import Conversation, Run
from chat.openai_api import docs
from chat.openai_api.answers import Outcome, run_outcome
from chat.openai_api.conversation_items import conversation_of, v1_id
from chat.openai_api.response_approvals import (
    continued_echo,
    decisions_apply,
    decisions_of_history,
)
from chat.openai_api.response_input import ResponseRequest, output_seen, response_request_read
from chat.openai_api.response_items import (
    INPUT_ITEMS,
    input_items_of,
    input_items_page,
    input_items_read,
)
from chat.openai_api.response_output import (
    response_echo,
    response_forget,
    response_id,
    response_parts,
    response_ref,
    response_resource,
    response_run,
    response_store,
)
from chat.openai_api.response_stream import response_events
from chat.openai_api.threads import thread_saw
from chat.openai_api.turns import Started, turn_start
from chat.openai_api.views import (
    TAG,
    WAIT_S,
    OpenAIView,
    sse_response,
    turn_headers,
    unanswered,
)
from chat.services.runs import run_cancel

ID_PARAMETER = OpenApiParameter(
    "response_id", str, OpenApiParameter.PATH, description="The response's id (`resp_...`)."
)


@dataclasses.dataclass(frozen=True)
class _Begun:
    started: Started
    read: ResponseRequest
    part: int = 0  # a response that went on with its run after approvals: its number


class ResponseCreateView(OpenAIView, AsyncApiView):
    """A response: one stored, audited toolchat turn."""

    throttle_classes = [MessageRateThrottle]
    throttle_scope = "messages"

    def post_first(self, request: Request) -> _Begun:
        """On the request's thread, after authentication: the request read, the turn started."""
        return _begin(request.user, request.data, request.META)

    @extend_schema(
        tags=TAG,
        operation_id="openai_responses_create",
        summary="Create a response (Responses API)",
        description=(
            "The Responses API (Open Responses), as a toolchat turn: toolchat's own tools run "
            "on the server and show as `mcp_call` items; `tools` in the request are the "
            "client's, returned as `function_call` items. `previous_response_id` continues a "
            "stored response's conversation. docs/openai-api.md."
        ),
        request=OpenApiTypes.OBJECT,
        responses={
            (200, "application/json"): OpenApiResponse(
                OpenApiTypes.OBJECT, description="The `response` object."
            ),
            (200, "text/event-stream"): OpenApiResponse(
                OpenApiTypes.STR,
                description="With `stream: true`: the response's events, then `[DONE]`.",
            ),
            **docs.errors(400, 404, 409, 429, 502),
        },
        examples=[
            docs.example("A question", docs.RESPONSE_REQUEST, request=True),
            docs.example("The response", docs.RESPONSE),
        ],
    )
    async def post(self, request: Request, begun: _Begun) -> Any:
        """Answer when the turn ends, or stream it."""
        started, echo = begun.started, begun.read.echo
        headers = turn_headers(started)
        if begun.part:
            headers["X-Toolchat-Response-Part"] = str(begun.part)
        if started.request.stream:
            return sse_response(_streamed(begun), headers)
        if begun.read.background:
            # Answered at once; the run goes on (and survives restarts), polled with GET.
            queued = await sync_to_async(response_resource)(started.run, echo, begun.part)
            return Response(queued, headers=headers)
        await run_end_wait(run=started.run, timeout=WAIT_S, begun=started.begun)
        outcome, body = await sync_to_async(_responded)(begun)
        if body is None:
            return Response({"error": outcome.error}, status=outcome.status, headers=headers)
        return Response(body, headers=headers)


class ResponseDetailView(OpenAIView):
    """One of the user's stored responses."""

    @extend_schema(
        tags=TAG,
        operation_id="openai_responses_retrieve",
        summary="Retrieve a response (Responses API)",
        parameters=[ID_PARAMETER],
        responses={200: OpenApiTypes.OBJECT, **docs.errors(404)},
        examples=[docs.example("The response", docs.RESPONSE)],
    )
    def get(self, request: Request, response_id: str) -> Response:
        """The response as its run stands now; another user's, or a deleted one, is a 404."""
        run, part = response_ref(request.user, response_id)
        return Response(response_resource(run, response_echo(run, part), part))

    @extend_schema(
        tags=TAG,
        operation_id="openai_responses_delete",
        summary="Delete a response (Responses API)",
        parameters=[ID_PARAMETER],
        responses={200: OpenApiTypes.OBJECT, **docs.errors(404)},
        examples=[docs.example("Deleted", docs.RESPONSE_DELETED)],
    )
    def delete(self, request: Request, response_id: str) -> Response:
        """No longer a stored response; its turn stays in the conversation and the audit."""
        run, part = response_ref(request.user, response_id)
        response_forget(run, part)
        body = {"id": response_id, "object": "response.deleted", "deleted": True}
        return Response(body, status=status.HTTP_200_OK)


class ResponseCancelView(OpenAIView):
    """Cancel a response whose run goes on."""

    @extend_schema(
        tags=TAG,
        operation_id="openai_responses_cancel",
        summary="Cancel a response (Responses API)",
        parameters=[ID_PARAMETER],
        request=None,
        responses={200: OpenApiTypes.OBJECT, **docs.errors(404, 409)},
        examples=[docs.example("Cancelled", docs.RESPONSE_CANCELLED)],
    )
    def post(self, request: Request, response_id: str) -> Response:
        """Its run cancelled (a background or in-flight one); a response that ended is a 409."""
        run, part = response_ref(request.user, response_id)
        if part != len(response_parts(run)):
            raise Conflict(f"{response_id} has ended; a later response goes on with its run.")
        run_cancel(run=run)
        return Response(response_resource(run, response_echo(run, part), part))


class ResponseInputItemsView(OpenAIView):
    """The items a stored response was given."""

    @extend_schema(
        tags=TAG,
        operation_id="openai_responses_input_items",
        summary="List a response's input items (Responses API)",
        parameters=[
            ID_PARAMETER,
            OpenApiParameter(
                "order", str, description="`desc` (newest first, the default) or `asc`."
            ),
            OpenApiParameter("after", str, description="The id of the item to list after."),
            OpenApiParameter("limit", int, description="1 to 100 (20 by default)."),
        ],
        responses={200: OpenApiTypes.OBJECT, **docs.errors(400, 404)},
        examples=[docs.example("The items", docs.INPUT_ITEMS)],
    )
    def get(self, request: Request, response_id: str) -> Response:
        """A page of the items, as OpenAI's list endpoints page."""
        run, part = response_ref(request.user, response_id)
        return Response(input_items_page(input_items_of(run, part), request.query_params))


def _begin(user: Any, body: Any, meta: dict[str, Any]) -> _Begun:
    """Read the request, start its turn, and keep it as a stored response (unless `store: false`)."""
    read = response_request_read(body, meta)
    continues = _continued(user, read.previous_response_id)
    if read.conversation is not None:
        continues = conversation_of(user, read.conversation, field="conversation")
        echo = {**read.echo, "conversation": {"id": v1_id(continues)}}
        read = dataclasses.replace(read, echo=echo)
    if read.decisions:
        return _decide(user, read, continues)
    with transaction.atomic():
        started = turn_start(
            user, read.completion, read.messages, meta, continues=continues, images_field="input"
        )
        if read.store:
            items = input_items_read(read.raw_input, started.run, 0)
            response_store(started.run, {**read.echo, INPUT_ITEMS: items})
    return _Begun(started, read)


def _continued(user: Any, previous: str | None) -> Conversation | None:
    """The conversation `previous_response_id` continues: its latest response's only."""
    if previous is None:
        return None
    run, part = response_ref(user, previous, field="previous_response_id")
    latest = (
        Run.objects.filter(conversation=run.conversation, replay_of__isnull=True)
        .order_by("-created_at")
        .first()
    )
    last_part = len(response_parts(latest)) if latest is not None else 0
    if latest is None or latest.pk != run.pk or part != last_part:
        shown = response_id(latest, last_part) if latest is not None else ""
        raise InvalidInput(
            f"{previous} is not the latest response of its conversation; continue "
            f"{shown} (branching an earlier one is not supported yet).",
            field="previous_response_id",
        )
    return run.conversation


def _decide(user: Any, read: ResponseRequest, conversation: Conversation | None) -> _Begun:
    """A request of approval responses: the waiting calls decided, the run's next part begun.

    With `previous_response_id` it names the run; a stateless history's closing
    answers name it themselves (in the `conversation` it names, if it names one).
    """
    if read.previous_response_id is not None:
        run = response_run(user, read.previous_response_id, field="previous_response_id")
        decisions = read.decisions
    else:
        run, decisions = decisions_of_history(user, read.decisions)
        if conversation is not None and conversation.pk != run.conversation_id:
            raise InvalidInput(
                f"{decisions[0].where}.approval_request_id is an approval request of another "
                "conversation than conversation.",
                field=f"{decisions[0].where}.approval_request_id",
            )
        conversation = run.conversation
    assert conversation is not None
    echo = continued_echo(run, read.previous_response_id, read.store, read.echo)
    part, cursor = decisions_apply(
        user, run, decisions, echo=echo, store=read.store, raw=read.raw_input
    )
    started = Started(run, conversation, read.completion, [], after=cursor)
    return _Begun(started, dataclasses.replace(read, echo=echo), part)


def _responded(begun: _Begun) -> tuple[Outcome, dict[str, Any] | None]:
    """The outcome of a response not streamed, its resource (None for an error) and what its
    client saw remembered, in one hand-off after the wait (as Chat Completions' `_answered`).

    A response cancelled while its request waited is answered as cancel answers it.
    """
    started = begun.started
    outcome = run_outcome(started.run.pk)
    failed = unanswered(started, outcome)
    if failed and (outcome.error or {}).get("code") != "run_cancelled":
        return outcome, None
    body = response_resource(started.run, begun.read.echo, begun.part)
    if not failed:
        _saw(begun, body)
    return outcome, body


def _saw(begun: _Begun, body: dict[str, Any]) -> None:
    """Remember what the client saw (its input and the output) for its next stateless request.

    A request that continued `previous_response_id` (or `conversation`) is
    followed by that, not by its history (turn_start cleared what its conversation
    remembers). A stateless history that decided approvals is its run's next part:
    what it saw is its history and that part's output.
    """
    if begun.read.previous_response_id is not None or begun.read.conversation is not None:
        return
    shown = begun.started.messages or begun.read.messages
    if shown:
        thread_saw(begun.started.conversation, [*shown, *output_seen(body["output"])])


async def _streamed(begun: _Begun) -> Any:
    """The response's events; at its end, what its client saw is remembered (in the stream's
    last hand-off, with the resource it ends with)."""

    def seen(body: dict[str, Any]) -> None:
        if body["status"] in ("completed", "incomplete", "in_progress"):
            _saw(begun, body)

    async for line in response_events(begun.started, begun.read.echo, begun.part, seen=seen):
        yield line
