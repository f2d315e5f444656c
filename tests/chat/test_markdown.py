"""Assistant text is shown as Markdown, and nothing a model writes can run in the page."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from chat.markdown import TAGS, markdown_html


class Elements(HTMLParser):
    """Every element of a fragment, as a browser's parser would see it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag, attrs):
        self.seen.append((tag, attrs))


def test_common_markdown_renders():
    html = markdown_html(
        "**Bold**, *em*, ~~gone~~ and `code`.\n\n- one\n- two\n\n1. first\n\n"
        "| name | value |\n|:--|--:|\n| a | 1 |\n\n> quoted\n\n[docs](https://example.com/x?a=1&b=2)"
    )
    assert "<strong>Bold</strong>" in html
    assert "<em>em</em>" in html
    assert "<s>gone</s>" in html
    assert "<code>code</code>" in html
    assert "<ul>\n<li>one</li>" in html
    assert "<ol>\n<li>first</li>" in html
    assert '<th style="text-align:left">name</th>' in html
    assert '<td style="text-align:right">1</td>' in html
    assert "<blockquote>" in html
    assert (
        '<a href="https://example.com/x?a=1&amp;b=2" rel="noopener noreferrer nofollow">docs</a>'
        in html
    )


def test_a_fenced_block_keeps_its_language_for_the_copy_button():
    html = markdown_html("```python\nprint('<hi>')\n```")
    assert html == ("<pre><code class=\"language-python\">print('&lt;hi&gt;')\n</code></pre>")


@pytest.mark.parametrize(
    "text",
    [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        '<a href="javascript:alert(1)">x</a>',
        "[x](javascript:alert(1))",
        "[x](JaVaScRiPt:alert(1))",
        "[x](vbscript:msgbox(1))",
        "[x](data:text/html;base64,PHNjcmlwdD4=)",
        "![x](javascript:alert(1))",
        '```" onmouseover="alert(1)\nz\n```',
        "<iframe src=https://evil.example></iframe>",
        '<div style="position:fixed">x</div>',
        '[x](https://example.com "a" onmouseover="alert(1))',
        "<!-- <script>alert(1)</script> -->",
        "<svg onload=alert(1)>",
    ],
)
def test_nothing_executable_survives(text):
    elements = Elements()
    elements.feed(markdown_html(text))
    for tag, attributes in elements.seen:
        assert tag in TAGS
        for name, value in attributes:
            assert not name.startswith("on")
            if name == "href":
                assert (value or "").startswith(("http:", "https:", "mailto:", "/", "#"))
            if name == "style":
                assert (value or "").startswith("text-align:")


def test_remote_images_become_links_and_are_never_loaded():
    html = markdown_html("![the <chart>](https://tracker.example/pixel.png)")
    assert "<img" not in html
    assert html == (
        '<p><a href="https://tracker.example/pixel.png" rel="noopener noreferrer nofollow">'
        "the &lt;chart&gt;</a></p>"
    )


def test_odd_text_is_rendered_not_refused():
    assert markdown_html("a\x00b") == "<p>a\ufffdb</p>"
    assert markdown_html("[" * 10_000).startswith("<p>[[[")
    assert markdown_html(">" * 5_000).count("<blockquote>") >= 1
