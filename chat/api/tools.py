"""Tools: what is registered, and the audit rows of the calls made."""

from __future__ import annotations

import uuid
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.api import docs
from chat.api.base import (
    CursorPage,
    page_serializer,
    paginate,
)
from chat.api.call_serializers import PolicyVerdictSerializer, ToolExecutionSerializer
from chat.inputs import StrictBooleanField, StrictInputSerializer, TextField
from chat.models import PolicyDecision
from chat.policies import ToolPolicies, Verdict, policies_for
from chat.selectors import tool_execution_list
from chat.services.approvals import MAX_REASON_CHARS, tool_call_decide
from tools.registry import registry as tool_registry
from tools.spec import ToolSpec

TAG = ["tools"]


def _tool_data(spec: ToolSpec, policies: ToolPolicies) -> dict[str, Any]:
    covered = policies.covering(spec.name)
    if covered is None and policies.default_deny:
        covered = Verdict(PolicyDecision.DENY, None)
    return {
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.openai_tool()["function"]["parameters"],
        "timeout_s": spec.timeout,
        "idempotent": spec.idempotent,
        "return_direct": spec.return_direct,
        "requires_approval": spec.requires_approval,
        "sensitive": sorted(spec.sensitive),
        "server": spec.server or None,
        "policy": None if covered is None else {"decision": covered.decision, "rule": covered.rule},
    }


class ToolListApi(APIView):
    """The registered tools, as the model is offered them."""

    class ToolSerializer(serializers.Serializer[Any]):
        name = serializers.CharField()
        description = serializers.CharField()
        parameters = serializers.DictField(help_text="The arguments' JSON Schema.")
        timeout_s = serializers.FloatField()
        idempotent = serializers.BooleanField(
            help_text="Safe to run again if its worker died mid-call."
        )
        return_direct = serializers.BooleanField(
            help_text="Its message ends the turn, with no further model call."
        )
        requires_approval = serializers.BooleanField()
        sensitive = serializers.ListField(
            child=serializers.CharField(), help_text="Arguments masked in the audit rows."
        )
        server = serializers.CharField(
            allow_null=True,
            help_text=(
                "The MCP server the tool comes from (its name is `<server>__<tool>`); "
                "null for a tool written in Python."
            ),
        )
        policy = PolicyVerdictSerializer(
            allow_null=True,
            help_text="What the tool policies decide for your calls of it: `deny` (it is not "
            "offered to the model), `ask` or `allow`, and the rule; null when no rule covers "
            "it (its own `requires_approval` decides). docs/governance.md.",
        )

    @extend_schema(
        tags=TAG,
        operation_id="tools_list",
        summary="List the tools",
        description=(
            "Every registered tool, in registration order (a short list: one page): the "
            "Python tools, then those of the MCP servers in TOOLCHAT_MCP_CONFIG. A server "
            "is connected the first time its tools are wanted; one that does not answer "
            "is left out until it does."
        ),
        responses={
            200: page_serializer("ToolPageSerializer", ToolSerializer),
            **docs.errors(),
        },
        examples=[
            docs.example(
                "Tools",
                {
                    "next": None,
                    "previous": None,
                    "results": [
                        {
                            "name": "calculator",
                            "description": "Evaluate an arithmetic expression exactly.",
                            "parameters": {
                                "type": "object",
                                "properties": {"expression": {"type": "string"}},
                                "required": ["expression"],
                            },
                            "timeout_s": 5.0,
                            "idempotent": True,
                            "return_direct": False,
                            "requires_approval": False,
                            "sensitive": [],
                            "server": None,
                            "policy": None,
                        },
                        {
                            "name": "time__get_current_time",
                            "description": "Get current time in a specific timezones",
                            "parameters": {
                                "type": "object",
                                "properties": {"timezone": {"type": "string"}},
                                "required": ["timezone"],
                            },
                            "timeout_s": 30.0,
                            "idempotent": True,
                            "return_direct": False,
                            "requires_approval": False,
                            "sensitive": [],
                            "server": "time",
                            "policy": {"decision": "ask", "rule": 3},
                        },
                    ],
                },
            )
        ],
    )
    def get(self, request: Request) -> Response:
        """All registered tools, with what the policies decide for the user's calls."""
        policies = policies_for(request.user.pk)
        return Response(
            {
                "next": None,
                "previous": None,
                "results": [_tool_data(spec, policies) for spec in tool_registry.specs()],
            }
        )


class ToolExecutionListApi(APIView):
    """The audit rows of the user's tool calls, newest first."""

    class Pagination(CursorPage):
        ordering = ("-created_at", "-id")

    class QuerySerializer(serializers.Serializer[Any]):
        conversation = serializers.UUIDField(required=False, help_text="Only this conversation.")
        run = serializers.UUIDField(required=False, help_text="Only this run.")

    @extend_schema(
        tags=TAG,
        operation_id="tool_executions_list",
        summary="List tool executions",
        description=(
            "The audit trail of your own runs: arguments as received, the raw result, what "
            "the model was sent, status, timings. Another user's conversation or run id "
            "filters to nothing. Staff see everyone's in the admin, not here."
        ),
        parameters=[QuerySerializer],
        responses={
            200: page_serializer("ToolExecutionPageSerializer", ToolExecutionSerializer),
            **docs.errors(400),
        },
        examples=[
            docs.example(
                "Executions", {"next": None, "previous": None, "results": [docs.TOOL_EXECUTION]}
            )
        ],
    )
    def get(self, request: Request) -> Response:
        """One page of audit rows (one query for the page)."""
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        executions = tool_execution_list(
            user=request.user,
            conversation_id=query.validated_data.get("conversation"),
            run_id=query.validated_data.get("run"),
        )
        return paginate(
            self.Pagination(),
            executions,
            request,
            self,
            lambda page: ToolExecutionSerializer(page, many=True).data,
        )


EXECUTION_ID = docs.path_id("execution_id", "The tool execution (its audit row's id).")


class _DecisionApi(APIView):
    """Approve or reject a tool call that waits for a decision (the run's owner only)."""

    approve: bool

    class InputSerializer(StrictInputSerializer):
        reason = TextField(
            required=False,
            allow_blank=True,
            max_length=MAX_REASON_CHARS,
            default="",
            help_text="Why; a rejection's reason is what the model reads.",
        )

    def post(self, request: Request, execution_id: uuid.UUID) -> Response:
        """Decide, and answer the call's audit row as it now is."""
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        execution = tool_call_decide(
            execution_id=execution_id,
            user=request.user,
            approve=self.approve,
            **body.validated_data,
        )
        fresh = tool_execution_list(user=request.user).get(pk=execution.pk)
        return Response(ToolExecutionSerializer(fresh).data)


_DECISION_DOC = (
    "For a call of a tool that requires approval, while its run is `awaiting_approval`. "
    "Another user's call is a 404; a call that does not wait (decided already, or its run "
    "ended) is a 409 whose `details` hold the decision made."
)


class ToolExecutionApproveApi(_DecisionApi):
    """Approve a waiting call: it runs, and the run goes on."""

    approve = True

    class InputSerializer(_DecisionApi.InputSerializer):
        arguments = serializers.DictField(
            required=False,
            help_text="Run it with these arguments instead of the model's (checked against the "
            "tool's parameters: a 400 names the field). A sensitive value sent back masked "
            "(***) keeps the model's. The model then reads the call as it ran.",
        )
        scope = serializers.ChoiceField(
            choices=["call", "conversation"],
            default="call",
            help_text="conversation: later calls of this tool in this conversation run without "
            "asking (a standing approval, listed and withdrawn at "
            "/api/v1/conversations/{id}/standing-approvals/).",
        )
        match_arguments = StrictBooleanField(
            default=False,
            help_text="With scope conversation: only later calls with these same arguments.",
        )

    @extend_schema(
        tags=TAG,
        operation_id="tool_executions_approve",
        summary="Approve a tool call",
        description=f"The call runs as a task, and the run goes on. {_DECISION_DOC}",
        parameters=[EXECUTION_ID],
        request=InputSerializer,
        responses={200: ToolExecutionSerializer, **docs.errors(400, 403, 404, 409)},
        examples=[
            docs.example("Approve", {"reason": "Go ahead."}, request=True),
            docs.example(
                "Approve other arguments, for the conversation",
                {"arguments": {"note_ids": ["3f2a…"]}, "scope": "conversation"},
                request=True,
            ),
            docs.example("Approved", {**docs.APPROVAL_EXECUTION, "status": "pending"}),
        ],
    )
    def post(self, request: Request, execution_id: uuid.UUID) -> Response:
        """Approve it."""
        return super().post(request, execution_id)


class ToolExecutionRejectApi(_DecisionApi):
    """Reject a waiting call: it never runs; the model is told, with the reason."""

    approve = False

    @extend_schema(
        tags=TAG,
        operation_id="tool_executions_reject",
        summary="Reject a tool call",
        description=(
            "The call never runs; the model reads 'rejected by the user: <reason>' as its "
            f"result and the run goes on to an answer. {_DECISION_DOC}"
        ),
        parameters=[EXECUTION_ID],
        request=_DecisionApi.InputSerializer,
        responses={200: ToolExecutionSerializer, **docs.errors(400, 403, 404, 409)},
        examples=[
            docs.example("Reject", {"reason": "Not this one."}, request=True),
            docs.example("Rejected", docs.REJECTED_EXECUTION),
        ],
    )
    def post(self, request: Request, execution_id: uuid.UUID) -> Response:
        """Reject it."""
        return super().post(request, execution_id)
