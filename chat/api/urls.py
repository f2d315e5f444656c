"""The REST API's URLs, mounted at /api/v1/ (DESIGN.md section 7)."""

from __future__ import annotations

from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from chat.api import (
    approvals,
    budgets,
    conversations,
    messages,
    models,
    policies,
    replays,
    resources,
    runs,
    tools,
)
from chat.api.base import route
from chat.api.errors import api_not_found

app_name = "api"

urlpatterns = [
    path(
        "conversations/",
        route(
            get=conversations.ConversationListApi.as_view(),
            post=conversations.ConversationCreateApi.as_view(),
        ),
        name="conversations",
    ),
    path(
        "conversations/<uuid:conversation_id>/",
        route(
            get=conversations.ConversationDetailApi.as_view(),
            patch=conversations.ConversationUpdateApi.as_view(),
            delete=conversations.ConversationDeleteApi.as_view(),
        ),
        name="conversation",
    ),
    path(
        "conversations/<uuid:conversation_id>/messages/",
        route(
            get=messages.MessageListApi.as_view(),
            post=messages.MessageCreateApi.as_view(),
        ),
        name="messages",
    ),
    path(
        "conversations/<uuid:conversation_id>/regenerate/",
        messages.RegenerateApi.as_view(),
        name="regenerate",
    ),
    path(
        "conversations/<uuid:conversation_id>/export/",
        conversations.ConversationExportApi.as_view(),
        name="export",
    ),
    path("runs/<uuid:run_id>/", runs.RunDetailApi.as_view(), name="run"),
    path("runs/<uuid:run_id>/events/", runs.RunEventListApi.as_view(), name="run-events"),
    path("runs/<uuid:run_id>/cancel/", runs.RunCancelApi.as_view(), name="run-cancel"),
    path("runs/<uuid:run_id>/replay/", replays.RunReplayApi.as_view(), name="run-replay"),
    path("runs/<uuid:run_id>/replays/", replays.RunReplayListApi.as_view(), name="run-replays"),
    path("runs/<uuid:run_id>/compare/", replays.RunCompareApi.as_view(), name="run-compare"),
    path("resources/<uuid:resource_id>/", resources.ResourceDetailApi.as_view(), name="resource"),
    path("models/", models.ModelListApi.as_view(), name="models"),
    path("tools/", tools.ToolListApi.as_view(), name="tools"),
    path("approvals/", approvals.ApprovalListApi.as_view(), name="approvals"),
    path(
        "conversations/<uuid:conversation_id>/standing-approvals/",
        approvals.StandingApprovalListApi.as_view(),
        name="standing-approvals",
    ),
    path(
        "conversations/<uuid:conversation_id>/standing-approvals/<int:approval_id>/",
        approvals.StandingApprovalWithdrawApi.as_view(),
        name="standing-approval",
    ),
    path(
        "tool-policies/",
        route(
            get=policies.ToolPolicyListApi.as_view(),
            post=policies.ToolPolicyCreateApi.as_view(),
        ),
        name="tool-policies",
    ),
    path(
        "tool-policies/<int:policy_id>/",
        route(
            get=policies.ToolPolicyDetailApi.as_view(),
            patch=policies.ToolPolicyUpdateApi.as_view(),
            delete=policies.ToolPolicyDeleteApi.as_view(),
        ),
        name="tool-policy",
    ),
    path(
        "budget-limits/",
        route(
            get=budgets.BudgetLimitListApi.as_view(),
            post=budgets.BudgetLimitCreateApi.as_view(),
        ),
        name="budget-limits",
    ),
    path(
        "budget-limits/<int:limit_id>/",
        route(
            get=budgets.BudgetLimitDetailApi.as_view(),
            patch=budgets.BudgetLimitUpdateApi.as_view(),
            delete=budgets.BudgetLimitDeleteApi.as_view(),
        ),
        name="budget-limit",
    ),
    path("usage/", budgets.UsageApi.as_view(), name="usage"),
    path("tool-executions/", tools.ToolExecutionListApi.as_view(), name="tool-executions"),
    path(
        "tool-executions/<uuid:execution_id>/approve/",
        tools.ToolExecutionApproveApi.as_view(),
        name="tool-execution-approve",
    ),
    path(
        "tool-executions/<uuid:execution_id>/reject/",
        tools.ToolExecutionRejectApi.as_view(),
        name="tool-execution-reject",
    ),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    # Anything else under /api/v1/, a malformed id included, is a JSON 404.
    re_path(r"^[\s\S]*$", api_not_found),
]
