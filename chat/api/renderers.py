"""The JSON every answer of the API is written in: DRF's, safe with any text it quotes.

An error may quote what the client sent (`"\\ud800x" is not a valid choice.`),
and a lone surrogate, which JSON escapes but UTF-8 cannot encode, would make
writing that answer fail: a 500 for a 400. Such an answer is written with
every non-ASCII character escaped, which is the same JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import renderers


class JSONRenderer(renderers.JSONRenderer):
    """DRF's JSON renderer; an answer holding a lone surrogate is written ASCII-escaped."""

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        """The answer's bytes (UTF-8, or ASCII with escapes when it must be)."""
        try:
            written: bytes = super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            escaped: bytes = _Escaped().render(data, accepted_media_type, renderer_context)
            return escaped
        return written


class _Escaped(renderers.JSONRenderer):
    ensure_ascii = True
