"""Budgets: staff manage the limits; everyone reads their own usage (docs/governance.md).

`/api/v1/budget-limits/` is staff only (everyone else 403), as the tool
policies are; `/api/v1/usage/` answers each person about themselves.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAdminUser, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.api import docs
from chat.exceptions import InvalidInput, NotFound
from chat.inputs import BudgetLimitInput
from chat.models import BudgetLimit, BudgetPeriod
from chat.services.budgets import (
    limit_create,
    limit_data,
    limit_delete,
    limit_stored,
    limit_update,
)
from chat.usage import usage_report

TAG = ["budgets"]
_ID = docs.path_int("limit_id", "The limit.")


class BudgetLimitSerializer(serializers.Serializer[Any]):
    """A limit: for whom, per what, how much (null: no cap), and whether it stops or warns."""

    id = serializers.IntegerField()
    users = serializers.ListField(
        child=serializers.CharField(), help_text="Usernames; with no groups either, everyone."
    )
    groups = serializers.ListField(child=serializers.CharField(), help_text="Group names.")
    period = serializers.ChoiceField(choices=BudgetPeriod.choices)
    tokens = serializers.IntegerField(required=False, allow_null=True)
    cost_usd = serializers.FloatField(required=False, allow_null=True, help_text="US dollars.")
    model_calls = serializers.IntegerField(required=False, allow_null=True)
    tool_calls = serializers.IntegerField(required=False, allow_null=True)
    seconds = serializers.IntegerField(required=False, allow_null=True)
    hard = serializers.BooleanField()
    note = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


def _output(limit: BudgetLimit) -> dict[str, Any]:
    data = {
        "id": limit.pk,
        **limit_data(limit),
        "created_at": limit.created_at,
        "updated_at": limit.updated_at,
    }
    return BudgetLimitSerializer(data).data


def _limit(limit_id: int) -> BudgetLimit:
    limit = BudgetLimit.objects.prefetch_related("users", "groups").filter(pk=limit_id).first()
    if limit is None:
        raise NotFound("Budget limit not found.")
    return limit


class BudgetLimitListApi(APIView):
    """Every limit, oldest first (staff)."""

    permission_classes = [IsAdminUser]

    @extend_schema(
        tags=TAG,
        operation_id="budget_limits_list",
        summary="List the budget limits",
        description="Every limit, oldest first (one page). Staff only.",
        responses={200: BudgetLimitSerializer(many=True), **docs.errors(403)},
        examples=[docs.example("The limits", [docs.BUDGET_LIMIT])],
    )
    def get(self, request: Request) -> Response:
        """The limits."""
        limits = BudgetLimit.objects.prefetch_related("users", "groups").order_by("id")
        return Response([_output(limit) for limit in limits])


class BudgetLimitCreateApi(APIView):
    """Add a limit (staff)."""

    permission_classes = [IsAdminUser]

    @extend_schema(
        tags=TAG,
        operation_id="budget_limits_create",
        summary="Add a budget limit",
        description=(
            "A `day` or `month` limit (UTC calendar) caps `tokens` and `cost_usd`; a `run` "
            "limit may also cap `model_calls`, `tool_calls` and `seconds`. A hard limit "
            "refuses a post once reached (429 `budget_exceeded`) or ends a run; a soft one "
            "warns (`budget.warning`). With neither `users` nor `groups`, it covers everyone."
        ),
        request=BudgetLimitInput,
        responses={201: BudgetLimitSerializer, **docs.errors(400, 403, 415)},
        examples=[
            docs.example(
                "200k tokens a day for interns",
                {"groups": ["interns"], "period": "day", "tokens": 200000, "cost_usd": 5},
                request=True,
            ),
            docs.example("Added", docs.BUDGET_LIMIT, status=201),
        ],
    )
    def post(self, request: Request) -> Response:
        """Store the limit."""
        given = BudgetLimitInput(data=request.data)
        given.is_valid(raise_exception=True)
        limit = limit_create(**given.validated_data)
        return Response(_output(_limit(limit.pk)), status=status.HTTP_201_CREATED)


class BudgetLimitDetailApi(APIView):
    """One limit (staff)."""

    permission_classes = [IsAdminUser]

    @extend_schema(
        tags=TAG,
        operation_id="budget_limits_retrieve",
        summary="Read a budget limit",
        parameters=[_ID],
        responses={200: BudgetLimitSerializer, **docs.errors(403, 404)},
        examples=[docs.example("A limit", docs.BUDGET_LIMIT)],
    )
    def get(self, request: Request, limit_id: int) -> Response:
        """The limit, or 404."""
        return Response(_output(_limit(limit_id)))


class BudgetLimitUpdateApi(APIView):
    """Change a limit (staff): only the fields sent change."""

    permission_classes = [IsAdminUser]

    @extend_schema(
        tags=TAG,
        operation_id="budget_limits_partial_update",
        summary="Change a budget limit",
        description="Only the fields sent change (null removes a cap); nothing changes if one "
        "of them is bad. Runs under way keep the per-run limits they started with.",
        parameters=[_ID],
        request=BudgetLimitInput,
        responses={200: BudgetLimitSerializer, **docs.errors(400, 403, 404, 415)},
        examples=[
            docs.example("Warn instead", {"hard": False}, request=True),
            docs.example("Changed", docs.BUDGET_LIMIT),
        ],
    )
    def patch(self, request: Request, limit_id: int) -> Response:
        """Apply the fields sent; nothing changes if one of them is bad."""
        limit = _limit(limit_id)
        given = BudgetLimitInput(
            data=request.data, partial=True, context={"stored": limit_stored(limit)}
        )
        given.is_valid(raise_exception=True)
        limit_update(limit=limit, **given.validated_data)
        return Response(_output(_limit(limit.pk)))


class BudgetLimitDeleteApi(APIView):
    """Remove a limit (staff)."""

    permission_classes = [IsAdminUser]

    @extend_schema(
        tags=TAG,
        operation_id="budget_limits_destroy",
        summary="Delete a budget limit",
        description="Runs under way keep the per-run limits they started with.",
        parameters=[_ID],
        responses={204: OpenApiResponse(description="Deleted."), **docs.errors(403, 404)},
    )
    def delete(self, request: Request, limit_id: int) -> Response:
        """Delete it."""
        limit_delete(limit=_limit(limit_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class UsageApi(APIView):
    """What the user used this day or month, and their limits."""

    permission_classes = [IsAuthenticated]

    @extend_schema(
        tags=TAG,
        operation_id="usage_retrieve",
        summary="Read your usage and limits",
        description=(
            "Your tokens and US dollars since the day or month began (UTC), per model and "
            "per day; what your runs in flight reserved; and every limit that covers you, "
            "with what a post's check counts against it (`used_*`, reservations included) "
            "and when it resets. Dollars are null where no call had a price."
        ),
        parameters=[
            OpenApiParameter(
                "period", str, enum=["day", "month"], description="day (the default) or month."
            )
        ],
        responses={200: OpenApiResponse(description="Your usage."), **docs.errors(400, 401)},
        examples=[docs.example("Today", docs.USAGE)],
    )
    def get(self, request: Request) -> Response:
        """The user's usage."""
        period = request.query_params.get("period", BudgetPeriod.DAY)
        if period not in (BudgetPeriod.DAY, BudgetPeriod.MONTH):
            raise InvalidInput("period: day or month.", field="period")
        return Response(usage_report(request.user.pk, period))
