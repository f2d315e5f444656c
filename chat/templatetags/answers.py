"""An answer on the staff pages as the chat page shows it: Markdown, sanitized.

`{% load answers %}` then `{{ message.content|answer_html }}`: chat/markdown.py
renders the Markdown with raw HTML off and nh3 keeps only its listed tags, so
whatever a model wrote stays text where it is not that subset.
"""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString, mark_safe

from chat.markdown import markdown_html

register = template.Library()


@register.filter
def answer_html(text: str | None) -> SafeString:
    """The text rendered as Markdown and sanitized by nh3 ("" for none)."""
    # nh3 has cleaned it (chat/markdown.py): safe to insert as it is.
    return mark_safe(markdown_html(text) if text else "")  # noqa: S308
