"""The API's request body parser: DRF's JSON parser, with too-deep nesting a parse error.

Python's json module recurses once per nested array or object, so a body like
`[[[[...]]]]` a hundred thousand deep raises RecursionError, which DRF does not
catch (it catches ValueError only) and which would answer 500. Here it is what
it is: a body the API cannot read, answered 400 `parse_error` (docs/api.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser as DrfJSONParser


class JSONParser(DrfJSONParser):
    """application/json bodies; nesting too deep to decode is a ParseError, not a 500."""

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        """The decoded body, or ParseError for invalid or too deeply nested JSON."""
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply.") from None
