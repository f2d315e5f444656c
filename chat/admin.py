"""The admin: conversations and runs with their latency, and the audit trail, read-only.

Messages, runs, model calls, tool executions and events are what happened; the
admin shows them and refuses to add, change or delete them (a conversation's
settings stay editable). Every value from a user, a model or a tool is escaped:
HTML is built with format_html / format_html_join only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from chat.audit.formatting import pretty_json, shown_tool_calls
from chat.audit.queries import run_latency_breakdown
from chat.models import Conversation, Message, ModelCall, Run, RunEvent, ToolExecution

if TYPE_CHECKING:
    # django-stubs makes these generic; at runtime Django's classes are not subscriptable.
    ConversationAdminBase = admin.ModelAdmin[Conversation]
    MessageAdminBase = admin.ModelAdmin[Message]
    RunAdminBase = admin.ModelAdmin[Run]
    ModelCallAdminBase = admin.ModelAdmin[ModelCall]
    ToolExecutionAdminBase = admin.ModelAdmin[ToolExecution]
    RunEventAdminBase = admin.ModelAdmin[RunEvent]
    RunInlineBase = admin.TabularInline[Run, Conversation]
    ModelCallInlineBase = admin.TabularInline[ModelCall, Run]
    ToolExecutionInlineBase = admin.TabularInline[ToolExecution, Run]
else:
    ConversationAdminBase = MessageAdminBase = RunAdminBase = admin.ModelAdmin
    ModelCallAdminBase = ToolExecutionAdminBase = RunEventAdminBase = admin.ModelAdmin
    RunInlineBase = ModelCallInlineBase = ToolExecutionInlineBase = admin.TabularInline

SHORT_CONTENT_CHARS = 80


def pre(text: str | None) -> SafeString:
    """Text kept exactly as stored (whitespace too) in a <pre>, escaped."""
    if text is None or text == "":
        return format_html('<span class="quiet">{}</span>', "—")
    return format_html('<pre style="{}">{}</pre>', PRE_STYLE, text)


def json_pre(value: Any) -> SafeString:
    """A JSON value indented in a <pre>, escaped."""
    return pre(pretty_json(value))


# The admin's own CSS has no style for long preformatted values: wrap them and cap the height.
PRE_STYLE = (
    "white-space: pre-wrap; overflow-wrap: anywhere; max-height: 28rem; overflow: auto; margin: 0;"
)


def admin_link(route: str, pk: Any, label: Any) -> SafeString:
    """A link to an object's admin change page."""
    if pk is None:
        return format_html("{}", "—")
    return format_html('<a href="{}">{}</a>', reverse(f"admin:{route}", args=[pk]), label)


def short_id(pk: Any) -> str:
    return str(pk)[:8]


class ReadOnlyAdminMixin:
    """The rows are a record of what happened: viewable, never added, changed or deleted here."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class RunRecordAdminMixin(ReadOnlyAdminMixin):
    """A run or a row of its audit trail: read-only, with the columns they share."""

    @admin.display(description="run", ordering="run_id")
    def run_link(self, obj: ModelCall | ToolExecution | RunEvent) -> SafeString:
        return admin_link("chat_run_change", obj.run_id, short_id(obj.run_id))

    @admin.display(description="error")
    def error_text(self, obj: Run | ModelCall | ToolExecution) -> SafeString:
        return pre(obj.error)


def _count_per_conversation(model: type[Message] | type[Run]) -> Coalesce:
    """A correlated COUNT per conversation: no join, so no row blow-up across the two counts."""
    counted = (
        model.objects.filter(conversation_id=OuterRef("pk"))
        .order_by()
        .values("conversation_id")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


# --- Conversations --------------------------------------------------------------------


class RunInline(ReadOnlyAdminMixin, RunInlineBase):
    model = Run
    extra = 0
    can_delete = False
    show_change_link = True
    fields = ("status", "mode", "steps", "model_calls", "latency_ms", "started_at", "finished_at")
    readonly_fields = fields
    ordering = ("-created_at",)


@admin.register(Conversation)
class ConversationAdmin(ConversationAdminBase):
    list_display = ("__str__", "owner", "mode", "message_count", "run_count", "updated_at")
    list_filter = ("mode",)
    list_select_related = ("owner",)
    search_fields = ("title", "owner__username", "owner__email")
    autocomplete_fields = ("owner",)
    readonly_fields = ("id", "last_event_seq", "created_at", "updated_at")
    fields = (
        "id",
        "owner",
        "title",
        "mode",
        "max_steps",
        "model",
        "system_prompt",
        "last_event_seq",
        "created_at",
        "updated_at",
    )
    inlines = (RunInline,)
    date_hierarchy = "updated_at"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Conversation]:
        return (
            super()
            .get_queryset(request)
            .annotate(
                message_count=_count_per_conversation(Message),
                run_count=_count_per_conversation(Run),
            )
        )

    @admin.display(description="messages", ordering="message_count")
    def message_count(self, obj: Conversation) -> int:
        return int(getattr(obj, "message_count", 0))

    @admin.display(description="runs", ordering="run_count")
    def run_count(self, obj: Conversation) -> int:
        return int(getattr(obj, "run_count", 0))


# --- Messages -------------------------------------------------------------------------


@admin.register(Message)
class MessageAdmin(ReadOnlyAdminMixin, MessageAdminBase):
    list_display = (
        "position",
        "role",
        "short_content",
        "name",
        "tool_call_id",
        "latency_ms",
        "tokens",
        "model",
        "conversation",
        "created_at",
    )
    list_display_links = ("position", "role")
    list_filter = ("role", "model")
    list_select_related = ("conversation",)
    search_fields = ("content", "tool_call_id", "name", "conversation__title")
    raw_id_fields = ("conversation", "run", "resource")
    ordering = ("-created_at",)
    fields = (
        "id",
        "conversation",
        "run",
        "position",
        "role",
        "content_text",
        "tool_calls_pretty",
        "tool_call_id",
        "name",
        "resource",
        "latency_ms",
        "model",
        "prompt_tokens",
        "completion_tokens",
        "finish_reason",
        "created_at",
    )
    readonly_fields = ("content_text", "tool_calls_pretty")

    @admin.display(description="content")
    def short_content(self, obj: Message) -> str:
        if obj.content is None:
            names = ", ".join(
                str((call.get("function") or {}).get("name", ""))
                for call in obj.tool_calls or []
                if isinstance(call, dict)
            )
            return f"(calls {names})" if names else "—"
        return Truncator(obj.content).chars(SHORT_CONTENT_CHARS)

    @admin.display(description="tokens (in / out)")
    def tokens(self, obj: Message) -> str:
        if obj.prompt_tokens is None and obj.completion_tokens is None:
            return "—"
        return f"{obj.prompt_tokens or 0} / {obj.completion_tokens or 0}"

    @admin.display(description="content")
    def content_text(self, obj: Message) -> SafeString:
        return pre(obj.content)

    @admin.display(description="tool calls")
    def tool_calls_pretty(self, obj: Message) -> SafeString:
        # Masked like every other place that shows arguments: see tools/audit.py.
        return json_pre(shown_tool_calls(obj) or None)


# --- Runs -----------------------------------------------------------------------------


class ModelCallInline(ReadOnlyAdminMixin, ModelCallInlineBase):
    model = ModelCall
    extra = 0
    can_delete = False
    show_change_link = True
    fields = (
        "step",
        "purpose",
        "model",
        "status",
        "first_token_ms",
        "latency_ms",
        "prompt_tokens",
        "completion_tokens",
        "attempts",
        "started_at",
    )
    readonly_fields = fields
    ordering = ("step", "started_at")


class ToolExecutionInline(ReadOnlyAdminMixin, ToolExecutionInlineBase):
    model = ToolExecution
    extra = 0
    can_delete = False
    show_change_link = True
    fields = (
        "step",
        "name",
        "tool_call_id",
        "status",
        "duration_ms",
        "result_chars",
        "truncated",
        "attempts",
        "created_at",
    )
    readonly_fields = fields
    ordering = ("step", "created_at")


@admin.register(Run)
class RunAdmin(RunRecordAdminMixin, RunAdminBase):
    list_display = (
        "short_id",
        "conversation",
        "owner",
        "status",
        "mode",
        "steps",
        "model_calls",
        "latency_ms",
        "started_at",
        "finished_at",
    )
    list_filter = ("status", "mode")
    list_select_related = ("conversation__owner",)
    search_fields = ("conversation__title", "conversation__owner__username", "error")
    date_hierarchy = "created_at"
    fields = (
        "id",
        "audit_link",
        "conversation",
        "trigger_message",
        "status",
        "mode",
        "steps",
        "model_calls",
        "latency_ms",
        "latency_breakdown",
        "created_at",
        "started_at",
        "finished_at",
        "heartbeat_at",
        "error_text",
    )
    readonly_fields = ("audit_link", "latency_breakdown", "error_text")
    inlines = (ModelCallInline, ToolExecutionInline)

    @admin.display(description="run", ordering="created_at")
    def short_id(self, obj: Run) -> str:
        return short_id(obj.pk)

    @admin.display(description="owner", ordering="conversation__owner__username")
    def owner(self, obj: Run) -> str:
        return obj.conversation.owner.get_username()

    @admin.display(description="audit page")
    def audit_link(self, obj: Run) -> SafeString:
        return format_html(
            '<a href="{}">{}</a>', reverse("chat:audit_run", args=[obj.pk]), "Open the timeline"
        )

    @admin.display(description="latency by step")
    def latency_breakdown(self, obj: Run) -> SafeString:
        lines = run_latency_breakdown(obj)
        if not lines:
            return format_html("{}", "No model call or tool execution recorded.")
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    line.step,
                    line.kind,
                    admin_link(
                        "chat_modelcall_change"
                        if line.kind == "model"
                        else "chat_toolexecution_change",
                        line.object_id,
                        line.label,
                    ),
                    line.status,
                    "" if line.first_token_ms is None else f"{line.first_token_ms} ms",
                    "—" if line.duration_ms is None else f"{line.duration_ms} ms",
                    line.detail,
                )
                for line in lines
            ),
        )
        return format_html(
            "<table><thead><tr><th>step</th><th>kind</th><th>what</th><th>status</th>"
            "<th>first token</th><th>duration</th><th>notes</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            rows,
        )


# --- The audit trail ------------------------------------------------------------------


@admin.register(ModelCall)
class ModelCallAdmin(RunRecordAdminMixin, ModelCallAdminBase):
    list_display = (
        "__str__",
        "run_link",
        "step",
        "purpose",
        "model",
        "provider",
        "status",
        "first_token_ms",
        "latency_ms",
        "prompt_tokens",
        "completion_tokens",
        "attempts",
        "started_at",
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
        "message_count",
        "request_hash",
        "tools_offered_pretty",
        "response_message",
        "finish_reason",
        "started_at",
        "first_token_ms",
        "latency_ms",
        "prompt_tokens",
        "completion_tokens",
        "attempts",
        "error_text",
    )
    readonly_fields = ("tools_offered_pretty", "error_text")

    @admin.display(description="tools offered")
    def tools_offered_pretty(self, obj: ModelCall) -> SafeString:
        return json_pre(obj.tools_offered)


@admin.register(ToolExecution)
class ToolExecutionAdmin(RunRecordAdminMixin, ToolExecutionAdminBase):
    list_display = (
        "name",
        "status",
        "duration_ms",
        "result_chars",
        "truncated",
        "attempts",
        "tool_call_id",
        "run_link",
        "created_at",
    )
    list_filter = ("status", "name", "truncated")
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
                    "task_id",
                )
            },
        ),
        ("Arguments", {"fields": ("arguments_pretty", "arguments_raw_text")}),
        (
            "Result",
            {
                "description": "The tool's raw result, and the exact text the model was sent.",
                "fields": ("result_pretty", "content_sent", "result_chars", "truncated"),
            },
        ),
        ("Error", {"fields": ("error_text",)}),
        ("Approval", {"fields": ("approved_by", "decided_at", "decision_reason")}),
        ("Timing", {"fields": ("created_at", "started_at", "finished_at", "duration_ms")}),
    )
    readonly_fields = (
        "arguments_pretty",
        "arguments_raw_text",
        "result_pretty",
        "content_sent",
        "error_text",
    )

    @admin.display(description="arguments")
    def arguments_pretty(self, obj: ToolExecution) -> SafeString:
        return json_pre(obj.arguments)

    @admin.display(description="arguments as sent (when not valid JSON)")
    def arguments_raw_text(self, obj: ToolExecution) -> SafeString:
        return pre(obj.arguments_raw)

    @admin.display(description="raw result")
    def result_pretty(self, obj: ToolExecution) -> SafeString:
        return json_pre(obj.result)

    @admin.display(description="content sent to the model")
    def content_sent(self, obj: ToolExecution) -> SafeString:
        return pre(obj.content)


@admin.register(RunEvent)
class RunEventAdmin(RunRecordAdminMixin, RunEventAdminBase):
    list_display = ("seq", "type", "run_link", "conversation", "created_at")
    list_filter = ("type",)
    list_select_related = ("conversation",)
    search_fields = ("type",)
    raw_id_fields = ("conversation", "run")
    ordering = ("-id",)
    fields = ("id", "conversation", "run", "seq", "type", "data_pretty", "created_at")
    readonly_fields = ("data_pretty",)

    @admin.display(description="data")
    def data_pretty(self, obj: RunEvent) -> SafeString:
        return json_pre(obj.data)
