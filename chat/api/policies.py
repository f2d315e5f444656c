"""Tool policies: staff list, create, read, change and delete the rules (docs/governance.md).

Everyone else is answered 403. A rule applies from the next claim of each
covered person's runs; the calls it decided keep its id in their record.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.api import docs
from chat.exceptions import NotFound
from chat.inputs import ToolPolicyInput
from chat.models import PolicyDecision, ToolPolicy
from chat.services.policies import policy_create, policy_data, policy_delete, policy_update

TAG = ["tool policies"]
_ID = docs.path_int("policy_id", "The rule.")


class ToolPolicySerializer(serializers.Serializer[Any]):
    """A rule: tool name patterns by who → allow, ask or deny."""

    id = serializers.IntegerField()
    tools = serializers.ListField(child=serializers.CharField())
    users = serializers.ListField(
        child=serializers.CharField(), help_text="Usernames; with no groups either, everyone."
    )
    groups = serializers.ListField(child=serializers.CharField(), help_text="Group names.")
    decision = serializers.ChoiceField(choices=PolicyDecision.choices)
    note = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


def _output(policy: ToolPolicy) -> dict[str, Any]:
    data = {
        "id": policy.pk,
        **policy_data(policy),
        "created_at": policy.created_at,
        "updated_at": policy.updated_at,
    }
    return ToolPolicySerializer(data).data


def _policy(policy_id: int) -> ToolPolicy:
    policy = ToolPolicy.objects.prefetch_related("users", "groups").filter(pk=policy_id).first()
    if policy is None:
        raise NotFound("Tool policy not found.")
    return policy


class ToolPolicyListApi(APIView):
    """Every rule, oldest first (staff)."""

    permission_classes = [IsAdminUser]

    @extend_schema(
        tags=TAG,
        operation_id="tool_policies_list",
        summary="List the tool policies",
        description="Every rule, oldest first (a short list: one page). Staff only.",
        responses={200: ToolPolicySerializer(many=True), **docs.errors(403)},
        examples=[docs.example("The rules", [docs.TOOL_POLICY])],
    )
    def get(self, request: Request) -> Response:
        """The rules."""
        rules = ToolPolicy.objects.prefetch_related("users", "groups").order_by("id")
        return Response([_output(policy) for policy in rules])


class ToolPolicyCreateApi(APIView):
    """Add a rule (staff)."""

    permission_classes = [IsAdminUser]

    @extend_schema(
        tags=TAG,
        operation_id="tool_policies_create",
        summary="Add a tool policy",
        description=(
            "Of the rules that cover a call, deny wins over ask and ask over allow, whatever "
            "their order. `users` and `groups` name people and groups that exist; with "
            "neither, the rule covers everyone."
        ),
        request=ToolPolicyInput,
        responses={201: ToolPolicySerializer, **docs.errors(400, 403, 415)},
        examples=[
            docs.example(
                "Ask before deleting",
                {"tools": ["delete_*"], "groups": ["ops"], "decision": "ask"},
                request=True,
            ),
            docs.example("Added", docs.TOOL_POLICY, status=201),
        ],
    )
    def post(self, request: Request) -> Response:
        """Store the rule."""
        rule = ToolPolicyInput(data=request.data)
        rule.is_valid(raise_exception=True)
        policy = policy_create(**rule.validated_data)
        return Response(_output(_policy(policy.pk)), status=status.HTTP_201_CREATED)


class ToolPolicyDetailApi(APIView):
    """One rule (staff)."""

    permission_classes = [IsAdminUser]

    @extend_schema(
        tags=TAG,
        operation_id="tool_policies_retrieve",
        summary="Read a tool policy",
        parameters=[_ID],
        responses={200: ToolPolicySerializer, **docs.errors(403, 404)},
        examples=[docs.example("A rule", docs.TOOL_POLICY)],
    )
    def get(self, request: Request, policy_id: int) -> Response:
        """The rule, or 404."""
        return Response(_output(_policy(policy_id)))


class ToolPolicyUpdateApi(APIView):
    """Change a rule (staff): only the fields sent change."""

    permission_classes = [IsAdminUser]

    @extend_schema(
        tags=TAG,
        operation_id="tool_policies_partial_update",
        summary="Change a tool policy",
        description="Only the fields sent change; nothing changes if one of them is bad.",
        parameters=[_ID],
        request=ToolPolicyInput,
        responses={200: ToolPolicySerializer, **docs.errors(400, 403, 404, 415)},
        examples=[
            docs.example("Ask instead", {"decision": "ask"}, request=True),
            docs.example("Changed", docs.TOOL_POLICY),
        ],
    )
    def patch(self, request: Request, policy_id: int) -> Response:
        """Apply the fields sent; nothing changes if one of them is bad."""
        policy = _policy(policy_id)
        rule = ToolPolicyInput(data=request.data, partial=True)
        rule.is_valid(raise_exception=True)
        policy_update(policy=policy, **rule.validated_data)
        return Response(_output(_policy(policy.pk)))


class ToolPolicyDeleteApi(APIView):
    """Remove a rule (staff)."""

    permission_classes = [IsAdminUser]

    @extend_schema(
        tags=TAG,
        operation_id="tool_policies_destroy",
        summary="Delete a tool policy",
        description="The calls it decided keep its id in their record.",
        parameters=[_ID],
        responses={204: OpenApiResponse(description="Deleted."), **docs.errors(403, 404)},
    )
    def delete(self, request: Request, policy_id: int) -> Response:
        """Delete it."""
        policy_delete(policy=_policy(policy_id))
        return Response(status=status.HTTP_204_NO_CONTENT)
