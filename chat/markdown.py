"""Assistant text as safe HTML: Markdown rendered by markdown-it-py, then sanitized by nh3.

Model output is untrusted input (a prompt injection can make a model write
anything), so the HTML a page shows is built in two independent layers:

1. markdown-it-py renders CommonMark plus tables and strikethrough with raw
   HTML turned off: `<script>` in the text comes out as text. Its link
   validator already drops `javascript:`, `vbscript:` and `data:` URLs.
2. nh3 (the Rust `ammonia` sanitizer) then keeps only the tags and attributes
   listed here, links only to http(s)/mailto/relative URLs, and marks every
   link `rel="noopener noreferrer nofollow"`.

Images are not loaded: a remote image would tell its server who read the
answer and when. An image becomes a link to it, labelled with its alt text.
"""

from __future__ import annotations

import html
from functools import lru_cache

import nh3
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

TAGS = {
    "p", "br", "hr", "strong", "em", "del", "s", "code", "pre", "blockquote",
    "ul", "ol", "li", "a", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip
ATTRIBUTES = {
    "a": {"href", "title"},
    "ol": {"start"},
    "th": {"style"},
    "td": {"style"},
}
# Table cells align with `style="text-align:..."`: the only style kept.
STYLE_PROPERTIES = {"text-align"}
LANGUAGE_PREFIX = "language-"


def _image_as_link(
    self: RendererHTML, tokens: list[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    label = self.renderInlineAsText(token.children or [], options, env) or src
    return f'<a href="{escapeHtml(src)}">{escapeHtml(label)}</a>'


def _keep_language_class(tag: str, attribute: str, value: str) -> str | None:
    if attribute != "class":
        return value
    # Only `language-xyz` on <code>, so a fence's language survives for the copy button's label.
    if tag == "code" and value.startswith(LANGUAGE_PREFIX) and value[9:].replace("-", "").isalnum():
        return value
    return None


_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
_markdown.enable(["table", "strikethrough"])
_markdown.add_render_rule("image", _image_as_link)

_cleaner = nh3.Cleaner(
    tags=TAGS,
    attributes={**ATTRIBUTES, "code": {"class"}},
    attribute_filter=_keep_language_class,
    url_schemes={"http", "https", "mailto"},
    link_rel="noopener noreferrer nofollow",
    filter_style_properties=STYLE_PROPERTIES,
    strip_comments=True,
)


@lru_cache(maxsize=2048)
def markdown_html(text: str) -> str:
    """The text rendered as Markdown and sanitized: HTML that is safe to insert into a page."""
    return _cleaner.clean(_markdown.render(text)).strip()


_no_tags = nh3.Cleaner(tags=set(), attributes={}, strip_comments=True)


def markdown_text(text: str) -> str:
    """What a reader of the rendered text sees, as plain text on one line (no Markdown syntax).

    Not HTML: escape it where it is inserted into a page.
    """
    return " ".join(html.unescape(_no_tags.clean(markdown_html(text))).split())
