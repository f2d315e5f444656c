"""The admin for conversations (with their runs inline) and their messages."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from chat.admin.base import (
    FiguresAdminMixin,
    ReadOnlyAdminMixin,
    admin_link,
    json_pre,
    listed_time,
    long_word,
    pre,
    runs_with_steps,
    tokens_shown,
)
from chat.audit.formatting import shown_tool_calls
from chat.markdown import markdown_text
from chat.models import Conversation, Message, Role, Run

if TYPE_CHECKING:
    # django-stubs makes these generic; at runtime Django's classes are not subscriptable.
    ConversationAdminBase = admin.ModelAdmin[Conversation]
    MessageAdminBase = admin.ModelAdmin[Message]
    RunInlineBase = admin.TabularInline[Run, Conversation]
else:
    ConversationAdminBase = MessageAdminBase = admin.ModelAdmin
    RunInlineBase = admin.TabularInline

SHORT_CONTENT_CHARS = 60
SHORT_TITLE_CHARS = 28


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


class RunInline(FiguresAdminMixin, ReadOnlyAdminMixin, RunInlineBase):
    model = Run
    extra = 0
    can_delete = False
    show_change_link = True
    fields = (
        "status",
        "mode",
        "model_steps",
        "model_calls",
        "latency",
        "started_at",
        "finished_at",
    )

    @admin.display(description="steps")
    def model_steps(self, obj: Run) -> int:
        return int(getattr(obj, "model_steps", 0))  # as the audit counts them (docs/audit.md)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        return runs_with_steps(super().get_queryset(request))

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
class MessageAdmin(FiguresAdminMixin, ReadOnlyAdminMixin, MessageAdminBase):
    # Latency and tokens come right after the text, so that at 1280 px they are in view.
    list_display = (
        "position",
        "role",
        "short_content",
        "latency",
        "tokens",
        "model",
        "tool",
        "conversation_link",
        "created",
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
        "images_list",
        "reasoning_text",
        "tool_calls_pretty",
        "tool_call_id",
        "name",
        "resource",
        "latency",
        "model",
        "prompt_tokens_shown",
        "completion_tokens_shown",
        "finish_reason",
        "created_at",
    )
    readonly_fields = (
        "content_text",
        "images_list",
        "reasoning_text",
        "tool_calls_pretty",
        "latency",
        "prompt_tokens_shown",
        "completion_tokens_shown",
    )

    @admin.display(description="images")
    def images_list(self, obj: Message) -> SafeString:
        """A user message's images: what each is, and its resource (an https URL as text)."""
        if not obj.images:
            return format_html("{}", "—")
        items = format_html_join(
            "",
            '<li>{} <a href="{}">resource</a></li>',
            (
                (
                    entry.get("url")
                    or f"{entry.get('media_type')}, {entry.get('bytes', 0):,} bytes",
                    reverse("admin:tools_resource_change", args=[entry.get("resource_id")]),
                )
                for entry in obj.images
            ),
        )
        return format_html("<ul>{}</ul>", items)

    @admin.display(description="reasoning")
    def reasoning_text(self, obj: Message) -> SafeString:
        return pre(obj.reasoning)

    @admin.display(description="content")
    def short_content(self, obj: Message) -> str:
        if obj.content is None:
            names = ", ".join(
                str((call.get("function") or {}).get("name", ""))
                for call in obj.tool_calls or []
                if isinstance(call, dict)
            )
            return f"(calls {names})" if names else "—"
        # An answer is Markdown: the list shows its words, not its syntax.
        shown = markdown_text(obj.content) if obj.role == Role.ASSISTANT else obj.content
        return Truncator(shown).chars(SHORT_CONTENT_CHARS)

    @admin.display(description="tool (call id)")
    def tool(self, obj: Message) -> SafeString:
        if obj.role != Role.TOOL:
            return format_html("{}", "—")
        return format_html("{}<br>{}", obj.name, long_word(obj.tool_call_id, quiet=True))

    @admin.display(description="conversation", ordering="conversation__title")
    def conversation_link(self, obj: Message) -> SafeString:
        title = Truncator(str(obj.conversation)).chars(SHORT_TITLE_CHARS)
        return admin_link("chat_conversation_change", obj.conversation_id, title)

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: Message) -> SafeString:
        return listed_time(obj.created_at)

    @admin.display(description="tokens (in / out)")
    def tokens(self, obj: Message) -> str:
        if obj.prompt_tokens is None and obj.completion_tokens is None:
            return "not reported" if obj.role == Role.ASSISTANT else "—"
        return tokens_shown(obj.prompt_tokens, obj.completion_tokens)

    @admin.display(description="content")
    def content_text(self, obj: Message) -> SafeString:
        return pre(obj.content)

    @admin.display(description="tool calls")
    def tool_calls_pretty(self, obj: Message) -> SafeString:
        # Masked like every other place that shows arguments: see tools/audit.py.
        return json_pre(shown_tool_calls(obj) or None)
