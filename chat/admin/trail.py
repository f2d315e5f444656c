"""The admin for a run's audit trail, read-only: its model calls, tool executions and events.

Each row is what happened, as it was stored: a model call's figures, a tool
call's arguments, raw result and what the model was sent, an event's data.
The runs themselves are in chat/admin/runs.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from chat.admin.base import (
    FiguresAdminMixin,
    RunRecordAdminMixin,
    figure_field,
    json_pre,
    listed_time,
    long_word,
    pre,
    tokens_shown,
    truncated_flag,
)
from chat.audit.formatting import shown_arguments, shown_event_data
from chat.models import ModelCall, RunEvent, ToolExecution

if TYPE_CHECKING:
    # django-stubs makes these generic; at runtime Django's classes are not subscriptable.
    ModelCallAdminBase = admin.ModelAdmin[ModelCall]
    ToolExecutionAdminBase = admin.ModelAdmin[ToolExecution]
    RunEventAdminBase = admin.ModelAdmin[RunEvent]
else:
    ModelCallAdminBase = ToolExecutionAdminBase = RunEventAdminBase = admin.ModelAdmin


@admin.register(ModelCall)
class ModelCallAdmin(FiguresAdminMixin, RunRecordAdminMixin, ModelCallAdminBase):
    # Its name says the purpose, provider/model and step (and the filters pick them):
    # the figures have the room.
    list_display = (
        "__str__",
        "run_link",
        "status",
        "first_token",
        "latency",
        "tokens",
        "attempts",
        "started",
    )
    list_filter = ("status", "purpose", "provider", "model")
    search_fields = ("model", "request_hash", "error")
    raw_id_fields = ("run", "response_message")
    ordering = ("-started_at",)
    fields = (
        "id",
        "run",
        "step",
        "purpose",
        "model",
        "provider",
        "status",
        "messages_sent",
        "request_hash",
        "tools_offered_pretty",
        "response_message",
        "finish_reason",
        "started_at",
        "first_token",
        "latency",
        "prompt_tokens_shown",
        "completion_tokens_shown",
        "attempts",
        "note",
        "error_text",
    )
    readonly_fields = (
        "tools_offered_pretty",
        "error_text",
        "first_token",
        "latency",
        "prompt_tokens_shown",
        "completion_tokens_shown",
        "messages_sent",
    )

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: ModelCall) -> SafeString:
        return listed_time(obj.started_at)

    messages_sent = figure_field("message_count", "messages sent")

    @admin.display(description="tokens (in / out)")
    def tokens(self, obj: ModelCall) -> str:
        return tokens_shown(obj.prompt_tokens, obj.completion_tokens)

    @admin.display(description="tools offered")
    def tools_offered_pretty(self, obj: ModelCall) -> SafeString:
        return json_pre(obj.tools_offered)


@admin.register(ToolExecution)
class ToolExecutionAdmin(FiguresAdminMixin, RunRecordAdminMixin, ToolExecutionAdminBase):
    list_display = (
        "name",
        "status",
        "duration",
        "result_chars_shown",
        "truncated_flag",
        "attempts",
        "call_id",
        "run_link",
        "created",
    )
    list_filter = ("status", "name", "truncated")

    @admin.display(description="truncated", ordering="truncated")
    def truncated_flag(self, obj: ToolExecution) -> str:
        return truncated_flag(obj)

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: ToolExecution) -> SafeString:
        return listed_time(obj.created_at)

    @admin.display(description="tool call id", ordering="tool_call_id")
    def call_id(self, obj: ToolExecution) -> SafeString:
        return long_word(obj.tool_call_id)

    search_fields = ("tool_call_id", "name", "error")
    raw_id_fields = ("run", "message", "approved_by")
    ordering = ("-created_at",)
    date_hierarchy = "created_at"
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "run",
                    "message",
                    "step",
                    "tool_call_id",
                    "name",
                    "status",
                    "attempts",
                    "worker",
                )
            },
        ),
        ("Arguments", {"fields": ("arguments_pretty", "arguments_raw_text")}),
        (
            "Result",
            {
                "description": "The tool's raw result, and the exact text the model was sent.",
                "fields": ("result_pretty", "content_sent", "result_chars_shown", "truncated"),
            },
        ),
        ("Error", {"fields": ("error_text",)}),
        (
            "Approval",
            {
                "fields": (
                    "policy_shown",
                    "decision",
                    "approved_by",
                    "decided_at",
                    "approval_wait",
                    "decision_reason",
                )
            },
        ),
        ("Timing", {"fields": ("created_at", "started_at", "finished_at", "duration")}),
    )
    readonly_fields = (
        "policy_shown",
        "decision",
        "approval_wait",
        "arguments_pretty",
        "arguments_raw_text",
        "result_pretty",
        "content_sent",
        "error_text",
        "result_chars_shown",
        "duration",
    )

    @admin.display(description="arguments")
    def arguments_pretty(self, obj: ToolExecution) -> SafeString:
        # Masked like every other place that shows arguments: see tools/audit.py.
        return json_pre(shown_arguments(obj)[0])

    @admin.display(description="arguments as sent (when not valid JSON)")
    def arguments_raw_text(self, obj: ToolExecution) -> SafeString:
        return pre(shown_arguments(obj)[1])

    @admin.display(description="raw result")
    def result_pretty(self, obj: ToolExecution) -> SafeString:
        return json_pre(obj.result)

    @admin.display(description="content sent to the model")
    def content_sent(self, obj: ToolExecution) -> SafeString:
        return pre(obj.content)

    @admin.display(description="tool policy")
    def policy_shown(self, obj: ToolExecution) -> SafeString:
        if not obj.policy_decision:
            return format_html("{}", "—")
        if obj.policy_rule is None:
            return format_html("{} (no rule)", obj.policy_decision)
        return format_html(
            '{} by <a href="{}">rule {}</a>',
            obj.policy_decision,
            reverse("admin:chat_toolpolicy_change", args=[obj.policy_rule]),
            obj.policy_rule,
        )

    @admin.display(description="decision")
    def decision(self, obj: ToolExecution) -> str:
        return obj.decision or ("awaiting" if obj.status == "awaiting_approval" else "—")

    @admin.display(description="waited for the decision")
    def approval_wait(self, obj: ToolExecution) -> str:
        wait = obj.approval_wait_ms
        if wait is None and (undecided := obj.undecided_wait_ms) is not None:
            return f"{undecided:,} ms, undecided: {obj.get_status_display().lower()} with its run"
        return "—" if wait is None else f"{wait:,} ms"


@admin.register(RunEvent)
class RunEventAdmin(RunRecordAdminMixin, RunEventAdminBase):
    list_display = ("seq", "type", "run_link", "conversation", "created")
    list_filter = ("type",)
    list_select_related = ("conversation",)
    search_fields = ("type",)
    raw_id_fields = ("conversation", "run")
    ordering = ("-id",)
    fields = ("id", "conversation", "run", "seq", "type", "data_pretty", "created_at")
    readonly_fields = ("data_pretty",)

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: RunEvent) -> SafeString:
        return listed_time(obj.created_at)

    @admin.display(description="data")
    def data_pretty(self, obj: RunEvent) -> SafeString:
        return json_pre(shown_event_data(obj.data))
