"""Replays: run a stored turn again on another model, and compare two runs (docs/replay.md)."""

from __future__ import annotations

import uuid
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.api import docs
from chat.api.base import page_serializer
from chat.api.serializers import RunSerializer
from chat.comparison import runs_compare
from chat.inputs import StrictInputSerializer, TextField
from chat.message_rate import MessageRateThrottle, ScopedThrottle
from chat.models import Mode, ReplayMode, ReplayTools, RunStatus
from chat.selectors import run_detail, run_get, run_replay_list
from chat.services.conversations import MODEL_MAX_LENGTH
from chat.services.replays import run_replay

TAG = ["runs"]
RUN_ID = docs.path_id("run_id", "The run to replay.")


class RunReplayApi(APIView):
    """Replay one of the user's runs on a model, in a conversation of its own."""

    # A replay makes model calls as a message does: it draws on the same budget.
    throttle_classes = [MessageRateThrottle]
    throttle_scope = "messages"

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
        responses={202: RunSerializer, **docs.errors(400, 403, 404, 409, 415, 429)},
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


# Built with type(): `with` is a Python keyword, so no class body can declare it.
COMPARE_QUERY: type[serializers.Serializer[Any]] = type(
    "RunCompareQuerySerializer",
    (serializers.Serializer,),
    {"with": serializers.UUIDField(help_text="The run to compare with (one of yours).")},
)


class ComparedCallSerializer(serializers.Serializer[Any]):
    """One tool call of a compared run."""

    step = serializers.IntegerField()
    name = serializers.CharField()
    arguments = serializers.JSONField(help_text="As the tool sees them (after its validation).")
    status = serializers.CharField(help_text="The audit row's status; empty in a forced replay.")
    match = serializers.ChoiceField(
        choices=["matched", "unmatched", "live"],
        help_text="matched: served a recorded result (forced: the original's call at that "
        "step); unmatched: no recorded call was equal; live: the tool ran.",
    )
    replayed_from = serializers.UUIDField(allow_null=True)


class ComparedRunSerializer(serializers.Serializer[Any]):
    """One side of a comparison."""

    id = serializers.UUIDField()
    conversation_id = serializers.UUIDField()
    replay_of = serializers.UUIDField(allow_null=True)
    replay_tools = serializers.CharField()
    replay_mode = serializers.CharField()
    status = serializers.CharField()
    error = serializers.CharField(
        allow_null=True, help_text="Why the run failed, in its own words; null for any other."
    )
    models = serializers.ListField(child=serializers.CharField(), help_text="Models called.")
    answer = serializers.CharField(allow_null=True, help_text="The final answer, if completed.")
    tool_calls = ComparedCallSerializer(many=True)
    steps = serializers.IntegerField(help_text="The steps that ran tools (what max_steps bounds).")
    model_steps = serializers.IntegerField(
        help_text="The distinct steps of its model calls: the audit's Steps."
    )
    model_calls = serializers.IntegerField()
    latency_ms = serializers.IntegerField(allow_null=True)
    first_token_ms = serializers.IntegerField(allow_null=True)
    prompt_tokens = serializers.IntegerField(allow_null=True)
    completion_tokens = serializers.IntegerField(allow_null=True)


class DiffPartSerializer(serializers.Serializer[Any]):
    """A run of words of the answers' diff."""

    op = serializers.ChoiceField(choices=["equal", "delete", "insert"])
    text = serializers.CharField()


class ComparedStepSerializer(serializers.Serializer[Any]):
    """The tool calls of one step in each run."""

    step = serializers.IntegerField()
    calls = serializers.ListField(child=serializers.ListField(child=serializers.DictField()))
    same = serializers.BooleanField()


_NOTE_CALL: dict[str, Any] = {
    "step": 1,
    "name": "record_note",
    "arguments": {"title": "Milk", "body": "two litres"},
    "status": "succeeded",
    "match": "live",
    "replayed_from": None,
}
_SIDE: dict[str, Any] = {
    "id": docs.RUN_ID,
    "conversation_id": docs.CONVERSATION_ID,
    "replay_of": None,
    "replay_tools": "",
    "replay_mode": "",
    "status": "completed",
    "error": None,
    "models": ["openai/gpt-4o-mini"],
    "answer": "I noted it.",
    "tool_calls": [_NOTE_CALL],
    "steps": 1,
    "model_calls": 2,
    "latency_ms": 1300,
    "first_token_ms": 420,
    "prompt_tokens": 867,
    "completion_tokens": 27,
}
COMPARISON = {
    "runs": [
        _SIDE,
        {
            **_SIDE,
            "id": "5b0e6f1c-2d3a-4b5c-8d9e-0f1a2b3c4d5e",
            "conversation_id": "8c7d6e5f-4a3b-4c2d-9e1f-0a9b8c7d6e5f",
            "replay_of": docs.RUN_ID,
            "replay_tools": "recorded",
            "replay_mode": "free",
            "models": ["local/qwen3"],
            "answer": "Noted: milk, two litres.",
            "tool_calls": [
                {
                    **_NOTE_CALL,
                    "status": "replayed",
                    "match": "matched",
                    "replayed_from": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
                }
            ],
            "latency_ms": 2100,
            "first_token_ms": 880,
            "prompt_tokens": 901,
            "completion_tokens": 31,
        },
    ],
    "answer_similarity": 0.0,
    "answer_diff": [
        {"op": "delete", "text": "I noted it."},
        {"op": "insert", "text": "Noted: milk, two litres."},
    ],
    "answer_diff_limited": False,
    "same_tool_calls": True,
    "steps": [
        {
            "step": 1,
            "calls": [
                [
                    {
                        "name": "record_note",
                        "arguments": {"title": "Milk", "body": "two litres"},
                        "match": "live",
                    }
                ],
                [
                    {
                        "name": "record_note",
                        "arguments": {"title": "Milk", "body": "two litres"},
                        "match": "matched",
                    }
                ],
            ],
            "same": True,
        }
    ],
}


class RunCompareApi(APIView):
    """Two of the user's runs side by side (a replay and its original, usually)."""

    # Each comparison reads both runs' records and diffs their answers: a budget of its own.
    throttle_classes = [ScopedThrottle]
    throttle_scope = "compare"

    class OutputSerializer(serializers.Serializer[Any]):
        runs = ComparedRunSerializer(many=True, help_text="This run, then `with`.")
        answer_similarity = serializers.FloatField(
            allow_null=True, help_text="0 to 1, by words; null when either has no answer."
        )
        answer_diff = DiffPartSerializer(
            many=True,
            help_text="By words (white space goes with what changed): delete, only in this "
            "run's answer; insert, only in `with`'s. The equal and deleted parts make this "
            "run's answer, the equal and inserted ones `with`'s.",
        )
        answer_diff_limited = serializers.BooleanField(
            help_text="The answers differ over too many words to diff whole (at most 5,000 "
            "words of each differing part, fewer when the same words repeat): only the start "
            "of the differing parts was diffed word by word, the rest is one delete and one "
            "insert, and `answer_similarity` counts it as different (a lower bound)."
        )
        same_tool_calls = serializers.BooleanField(
            help_text="The same tools with equal arguments, in the same order."
        )
        steps = ComparedStepSerializer(many=True)

    @extend_schema(
        tags=TAG,
        operation_id="runs_compare",
        summary="Compare two runs",
        description=(
            "This run and `with`, side by side: final answers with a word-level diff and "
            "their similarity, the tool calls in order (matched, unmatched or live), step by "
            "step, and each run's steps, model calls, latency, time to first token and "
            "tokens. Both must be yours (404 otherwise). Comparisons have a rate limit of "
            "their own (`TOOLCHAT_COMPARE_RATE`, 429 over it)."
        ),
        parameters=[docs.path_id("run_id", "The first run."), COMPARE_QUERY],
        responses={200: OutputSerializer, **docs.errors(400, 404, 429)},
        examples=[docs.example("A replay against its original", COMPARISON)],
    )
    def get(self, request: Request, run_id: uuid.UUID) -> Response:
        """The comparison."""
        query = COMPARE_QUERY(data=request.query_params)
        query.is_valid(raise_exception=True)
        return Response(
            runs_compare(run_id=run_id, other_id=query.validated_data["with"], user=request.user)
        )


class RunReplayListApi(APIView):
    """The replays of one of the user's runs."""

    class OutputSerializer(serializers.Serializer[Any]):
        id = serializers.UUIDField()
        conversation_id = serializers.UUIDField()
        model = serializers.CharField(
            source="conversation.model", help_text="The model replayed on."
        )
        replay_tools = serializers.ChoiceField(choices=ReplayTools.choices)
        replay_mode = serializers.ChoiceField(choices=ReplayMode.choices)
        status = serializers.ChoiceField(choices=RunStatus.choices)
        error = serializers.CharField(
            allow_null=True, help_text="Why a failed replay failed; null for any other."
        )
        created_at = serializers.DateTimeField()

        def to_representation(self, instance: Any) -> dict[str, Any]:
            data = super().to_representation(instance)
            data["error"] = data["error"] or None
            return data

    @extend_schema(
        tags=TAG,
        operation_id="runs_replays",
        summary="List a run's replays",
        description=(
            "Every replay of the run, oldest first (one page): its model, how it replays, its "
            "status. Compare one with GET /api/v1/runs/{id}/compare/?with=."
        ),
        parameters=[docs.path_id("run_id", "The replayed run.")],
        responses={
            200: page_serializer("RunReplayPageSerializer", OutputSerializer),
            **docs.errors(404),
        },
        examples=[
            docs.example(
                "Replays",
                {
                    "next": None,
                    "previous": None,
                    "results": [
                        {
                            "id": "5b0e6f1c-2d3a-4b5c-8d9e-0f1a2b3c4d5e",
                            "conversation_id": "8c7d6e5f-4a3b-4c2d-9e1f-0a9b8c7d6e5f",
                            "model": "local/qwen3",
                            "replay_tools": "recorded",
                            "replay_mode": "free",
                            "status": "completed",
                            "error": None,
                            "created_at": "2025-05-01T09:40:00.010000Z",
                        }
                    ],
                },
            )
        ],
    )
    def get(self, request: Request, run_id: uuid.UUID) -> Response:
        """The replays."""
        run = run_get(run_id=run_id, user=request.user)
        replays = self.OutputSerializer(run_replay_list(run=run), many=True).data
        return Response({"next": None, "previous": None, "results": replays})
