"""Replays: run a stored turn again on another model (docs/replay.md)."""

from __future__ import annotations

import uuid

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.api import docs
from chat.api.serializers import RunSerializer
from chat.inputs import StrictInputSerializer, TextField
from chat.models import Mode, ReplayMode, ReplayTools
from chat.selectors import run_detail, run_get
from chat.services.conversations import MODEL_MAX_LENGTH
from chat.services.replays import run_replay

TAG = ["runs"]
RUN_ID = docs.path_id("run_id", "The run to replay.")


class RunReplayApi(APIView):
    """Replay one of the user's runs on a model, in a conversation of its own."""

    class InputSerializer(StrictInputSerializer):
        model = TextField(
            max_length=MODEL_MAX_LENGTH,
            help_text="The model to replay the run on, an `id` of GET /api/v1/models/.",
        )
        tools = serializers.ChoiceField(
            choices=ReplayTools.choices,
            default=ReplayTools.RECORDED,
            help_text="`recorded` (default): each tool call is served the original's recorded "
            "result for the same tool and equal arguments, and nothing runs (`replayed`, or "
            "`unmatched` with no such call); `live`: the tools run for real.",
        )
        replay = serializers.ChoiceField(
            choices=ReplayMode.choices,
            default=ReplayMode.FREE,
            help_text="`free` (default): the model runs the turn its own way; `forced`: at each "
            "step of the original, the model is sent the original's history up to that step "
            "and no tool runs (teacher-forced; tools must be `recorded`).",
        )
        system_prompt = TextField(
            required=False,
            allow_blank=True,
            trim_whitespace=False,
            help_text="Instead of the original run's system prompt.",
        )
        mode = serializers.ChoiceField(
            choices=Mode.choices, required=False, help_text="Instead of the original run's mode."
        )

    @extend_schema(
        tags=TAG,
        operation_id="runs_replay",
        summary="Replay a run",
        description=(
            "Starts a replay of an ended run: a new conversation (its `replay_of` names the "
            "run; it is left out of the conversation list) holding the history the original's "
            "first model call was sent, and a queued run on `model` whose first request "
            "carries that history and the same tools. 202 with the new run; follow it as any "
            "run, and compare the two with GET /api/v1/runs/{id}/compare/?with=. 409 while "
            "the original is still active."
        ),
        parameters=[RUN_ID],
        request=InputSerializer,
        responses={202: RunSerializer, **docs.errors(400, 403, 404, 409, 415)},
        examples=[
            docs.example(
                "Replay",
                {"model": "offline/offline", "tools": "recorded", "replay": "free"},
                request=True,
            ),
            docs.example(
                "Queued replay",
                {
                    **docs.QUEUED_RUN,
                    "replay_of": docs.RUN_ID,
                    "replay_tools": "recorded",
                    "replay_mode": "free",
                },
                status=202,
            ),
        ],
    )
    def post(self, request: Request, run_id: uuid.UUID) -> Response:
        """Queue the replay; 202 with its run."""
        original = run_get(run_id=run_id, user=request.user)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        replica = run_replay(run=original, **serializer.validated_data)
        return Response(
            RunSerializer(run_detail(run_id=replica.pk, user=request.user)).data,
            status=status.HTTP_202_ACCEPTED,
        )
