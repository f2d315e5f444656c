"""Runs: their detail, their events (JSON or Server-Sent Events), and cancelling one."""

from __future__ import annotations

import re
import uuid
from typing import Any

from django.http import HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.api import docs
from chat.api.base import EventStreamNegotiation, accepts_event_stream
from chat.api.run_data import run_data
from chat.api.serializers import EventSerializer, RunSerializer
from chat.live.events import event_envelope
from chat.live.sse import sse_response
from chat.live.streams import MAX_SEQ, run_event_stream
from chat.models import RunStatus
from chat.selectors import run_event_list, run_get, run_shown
from chat.services.runs import run_cancel

SEQ = re.compile(r"[0-9]{1,19}")

TAG = ["runs"]
RUN_ID = docs.path_id("run_id", "The run.")


class RunDetailApi(APIView):
    """One run of one of the user's conversations."""

    @extend_schema(
        tags=TAG,
        operation_id="runs_retrieve",
        summary="Read a run",
        description=(
            "Status, steps and model-call count, timings (`created_at`, `started_at`, "
            "`finished_at`, `latency_ms` from the post to the end), token usage, each model "
            "call with its latency, and each tool execution (the audit rows)."
        ),
        parameters=[RUN_ID],
        responses={200: RunSerializer, **docs.errors(404)},
        examples=[docs.example("A completed run", docs.RUN)],
    )
    def get(self, request: Request, run_id: uuid.UUID) -> Response:
        """The run, or 404."""
        shown = run_shown(run_id=run_id, user=request.user)
        return Response(run_data(shown.run, shown.calls, shown.executions))


class RunEventListApi(APIView):
    """The run's events after a seq: a page of JSON, or a live SSE stream."""

    content_negotiation_class = EventStreamNegotiation

    class QuerySerializer(serializers.Serializer[Any]):
        after = serializers.IntegerField(
            default=0, min_value=0, max_value=MAX_SEQ, help_text="Only events with a higher seq."
        )
        limit = serializers.IntegerField(
            default=500, min_value=1, max_value=1000, help_text="JSON only: at most this many."
        )

    class OutputSerializer(serializers.Serializer[Any]):
        events = EventSerializer(many=True)
        last_seq = serializers.IntegerField(help_text="Pass it as `after` to read on.")
        has_more = serializers.BooleanField(help_text="True when `limit` cut the list short.")
        run_status = serializers.ChoiceField(choices=RunStatus.choices)

    @extend_schema(
        tags=TAG,
        operation_id="runs_events",
        summary="Read a run's events",
        description=(
            "The stored events of the run with a seq above `after` (seqs are numbered per "
            "conversation). With `Accept: text/event-stream`: the same events as Server-Sent "
            "Events, then the live ones, ending after the run's last event; a reconnecting "
            "client's `Last-Event-ID` header counts as `after`."
        ),
        parameters=[
            RUN_ID,
            QuerySerializer,
            OpenApiParameter(
                "Last-Event-ID",
                {"type": "integer", "minimum": 0},
                OpenApiParameter.HEADER,
                description="SSE reconnection: the last seq received (the larger of it and "
                "`after` is used).",
            ),
        ],
        responses={
            200: OutputSerializer,
            (200, "text/event-stream"): OpenApiResponse(
                OpenApiTypes.STR, description="Server-Sent Events (Accept: text/event-stream)."
            ),
            **docs.errors(400, 404),
        },
        examples=[
            docs.example(
                "Events",
                {
                    "events": [docs.EVENT],
                    "last_seq": 12,
                    "has_more": False,
                    "run_status": "running",
                },
            )
        ],
    )
    def get(self, request: Request, run_id: uuid.UUID) -> HttpResponseBase:
        """Events as JSON, or as an SSE stream that ends with the run."""
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        after: int = query.validated_data["after"]
        resume = request.headers.get("Last-Event-ID", "").strip()
        if resume:
            # ASCII digits only: str.isdigit() also takes "²" and "٣", which int() refuses.
            if not SEQ.fullmatch(resume) or int(resume) > MAX_SEQ:
                raise serializers.ValidationError({"Last-Event-ID": ["Must be an event's seq."]})
            after = max(after, int(resume))
        run = run_get(run_id=run_id, user=request.user)
        if accepts_event_stream(request):
            return sse_response(run_event_stream(run=run, after=after))
        limit: int = query.validated_data["limit"]
        events = run_event_list(run=run, after=after, limit=limit)
        return Response(
            {
                "events": [event_envelope(event) for event in events],
                "last_seq": events[-1].seq if events else after,
                "has_more": len(events) == limit,
                "run_status": run.status,
            }
        )


class RunCancelApi(APIView):
    """Stop a queued or running run."""

    @extend_schema(
        tags=TAG,
        operation_id="runs_cancel",
        summary="Cancel a run",
        description=(
            "Stops a queued or running run; its unanswered tool calls get a 'cancelled' "
            "result, so the history stays valid. 409 if the run has already ended."
        ),
        parameters=[RUN_ID],
        request=None,
        responses={200: RunSerializer, **docs.errors(403, 404, 409)},
        examples=[
            docs.example(
                "Cancelled",
                {**docs.QUEUED_RUN, "status": "cancelled", "latency_ms": 80},
            )
        ],
    )
    def post(self, request: Request, run_id: uuid.UUID) -> Response:
        """Cancel it and answer the run as it now is."""
        run = run_cancel(run=run_get(run_id=run_id, user=request.user))
        shown = run_shown(run_id=run.pk, user=request.user)
        return Response(run_data(shown.run, shown.calls, shown.executions))
