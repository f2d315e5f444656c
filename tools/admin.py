"""The admin for resources: the records tools made or read, linked to the call that made them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from tools.models import Resource

if TYPE_CHECKING:
    # django-stubs makes ModelAdmin generic; at runtime Django's class is not subscriptable.
    ResourceAdminBase = admin.ModelAdmin[Resource]
else:
    ResourceAdminBase = admin.ModelAdmin


@admin.register(Resource)
class ResourceAdmin(ResourceAdminBase):
    list_display = ("__str__", "kind", "owner", "execution_link", "created_at")
    list_filter = ("kind",)
    # The audit row's name is shown, so it comes in the same query as the resource.
    list_select_related = ("owner", "created_by_execution")
    search_fields = ("title", "kind", "owner__username")
    autocomplete_fields = ("owner",)
    date_hierarchy = "created_at"
    fields = (
        "id",
        "kind",
        "owner",
        "title",
        "data",
        "execution_link",
        "created_at",
        "updated_at",
    )
    # Which tool call made a resource is history: the admin shows it, never edits it.
    readonly_fields = ("id", "execution_link", "created_at", "updated_at")

    @admin.display(description="created by", ordering="created_by_execution__created_at")
    def execution_link(self, obj: Resource) -> SafeString:
        # A string route, not an import: `tools` never imports `chat` (STYLE.md).
        execution = obj.created_by_execution
        if execution is None:
            return format_html("{}", "—")
        return format_html(
            '<a href="{}">{} <code>{}</code></a>',
            reverse("admin:chat_toolexecution_change", args=[execution.pk]),
            execution.name,
            execution.tool_call_id,
        )
