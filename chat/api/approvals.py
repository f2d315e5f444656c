"""Approvals: the calls that wait for the user, and a conversation's standing approvals.

A decision itself is `POST /api/v1/tool-executions/{id}/approve/` or
`.../reject/` (chat/api/tools.py); docs/governance.md says what each does.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.api import docs
from chat.api.base import CursorPage, page_serializer, paginate
from chat.models import StandingApproval, ToolExecution
from chat.selectors import approvals_waiting, conversation_get, standing_approval_list
from chat.services.approvals import standing_approval_withdraw
from tools.registry import registry as tool_registry

TAG = ["approvals"]


class ApprovalSerializer(serializers.Serializer[Any]):
    """A call that waits for a person's decision."""

    id = serializers.UUIDField(help_text="The tool execution: approve or reject it by this id.")
    conversation_id = serializers.UUIDField()
    conversation_title = serializers.CharField()
    run_id = serializers.UUIDField()
    tool_call_id = serializers.CharField()
    tool = serializers.CharField()
    arguments = serializers.JSONField(
        allow_null=True, help_text="As the model sent them, sensitive ones masked."
    )
    description = serializers.CharField(help_text="What the call will do, in one line.")
    requested_at = serializers.DateTimeField()
    waited_ms = serializers.IntegerField(help_text="How long it has waited so far.")
    owner = serializers.CharField(help_text="Whose run it is (the user, unless staff ask all).")


def _approval(execution: ToolExecution, now: Any) -> dict[str, Any]:
    conversation = execution.run.conversation
    spec = tool_registry.get(execution.name)
    arguments = execution.arguments if execution.arguments is not None else {}
    return {
        "id": execution.pk,
        "conversation_id": conversation.pk,
        "conversation_title": conversation.title,
        "run_id": execution.run_id,
        "tool_call_id": execution.tool_call_id,
        "tool": execution.name,
        "arguments": execution.arguments,
        "description": spec.describe_call(arguments) if spec else execution.name,
        "requested_at": execution.created_at,
        "waited_ms": max(0, int((now - execution.created_at).total_seconds() * 1000)),
        "owner": conversation.owner.get_username(),
    }


APPROVAL = {
    "id": docs.APPROVAL_EXECUTION["id"],
    "conversation_id": docs.CONVERSATION_ID,
    "conversation_title": "Tidy my notes",
    "run_id": docs.RUN_ID,
    "tool_call_id": docs.CALL_ID,
    "tool": "delete_notes",
    "arguments": {"note_ids": ["3f2a…", "9b1c…"]},
    "description": "Delete 2 notes for good.",
    "requested_at": "2025-05-01T09:31:00.650000Z",
    "waited_ms": 4210,
    "owner": "demo",
}


class ApprovalListApi(APIView):
    """The calls waiting for the user's decision, newest first."""

    class Pagination(CursorPage):
        ordering = ("-created_at", "-id")

    class QuerySerializer(serializers.Serializer[Any]):
        all = serializers.BooleanField(
            default=False, help_text="Staff: everyone's waiting calls, not only yours."
        )

    @extend_schema(
        tags=TAG,
        operation_id="approvals_list",
        summary="List the calls waiting for you",
        description=(
            "Calls of your runs that wait for a decision (a tool that asks, or a tool policy "
            "that says ask), newest first, 50 a page. Staff see everyone's with `all=1`; for "
            "anyone else `all=1` is a 403. Decide one with POST "
            "/api/v1/tool-executions/{id}/approve/ or /reject/."
        ),
        parameters=[QuerySerializer],
        responses={
            200: page_serializer("ApprovalPageSerializer", ApprovalSerializer),
            **docs.errors(400, 403),
        },
        examples=[docs.example("Waiting", {"next": None, "previous": None, "results": [APPROVAL]})],
    )
    def get(self, request: Request) -> Response:
        """One page of waiting calls."""
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        everyone = query.validated_data["all"]
        if everyone and not request.user.is_staff:
            raise PermissionDenied("Only staff see everyone's approvals.")
        now = timezone.now()
        return paginate(
            self.Pagination(),
            approvals_waiting(user=request.user, everyone=everyone),
            request,
            self,
            lambda page: ApprovalSerializer([_approval(e, now) for e in page], many=True).data,
        )


class StandingApprovalSerializer(serializers.ModelSerializer[StandingApproval]):
    """A yes to a tool in one conversation: its later calls run without asking."""

    arguments = serializers.JSONField(
        read_only=True,
        allow_null=True,
        help_text="The arguments it covers (sensitive ones masked); null: any arguments.",
    )
    created_from = serializers.UUIDField(
        source="created_from_id", read_only=True, allow_null=True, help_text="The call approved."
    )

    class Meta:
        model = StandingApproval
        fields = ["id", "tool", "arguments", "created_from", "created_at"]
        read_only_fields = fields


CONVERSATION = docs.path_id("conversation_id", "The conversation.")


class StandingApprovalListApi(APIView):
    """A conversation's standing approvals in force."""

    @extend_schema(
        tags=TAG,
        operation_id="standing_approvals_list",
        summary="List a conversation's standing approvals",
        description=(
            "Made by approving a call with `scope: conversation`; each lets later calls of its "
            "tool (with any arguments, or with the same ones) run without asking. Oldest first."
        ),
        parameters=[CONVERSATION],
        responses={200: StandingApprovalSerializer(many=True), **docs.errors(404)},
        examples=[
            docs.example(
                "In force",
                [
                    {
                        "id": 4,
                        "tool": "delete_notes",
                        "arguments": None,
                        "created_from": docs.APPROVAL_EXECUTION["id"],
                        "created_at": "2025-05-01T09:33:10Z",
                    }
                ],
            )
        ],
    )
    def get(self, request: Request, conversation_id: uuid.UUID) -> Response:
        """The standing approvals."""
        conversation = conversation_get(conversation_id=conversation_id, user=request.user)
        rows = standing_approval_list(conversation=conversation)
        return Response(StandingApprovalSerializer(rows, many=True).data)


class StandingApprovalWithdrawApi(APIView):
    """Withdraw a standing approval: its tool asks again from the next call."""

    @extend_schema(
        tags=TAG,
        operation_id="standing_approvals_destroy",
        summary="Withdraw a standing approval",
        description="The calls it allowed keep its id in their record.",
        parameters=[
            CONVERSATION,
            docs.path_int("approval_id", "The standing approval."),
        ],
        responses={204: OpenApiResponse(description="Withdrawn."), **docs.errors(403, 404)},
    )
    def delete(self, request: Request, conversation_id: uuid.UUID, approval_id: int) -> Response:
        """Withdraw it."""
        standing_approval_withdraw(
            conversation_id=conversation_id, approval_id=approval_id, user=request.user
        )
        return Response(status=status.HTTP_204_NO_CONTENT)
