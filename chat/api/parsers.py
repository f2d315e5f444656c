"""The API's request body parser: DRF's JSON parser, refusing what it cannot read.

Python's json module recurses once per nested array or object, so a body like
`[[[[...]]]]` a hundred thousand deep raises RecursionError, which DRF does not
catch (it catches ValueError only) and which would answer 500. Here it is what
it is: a body the API cannot read, answered 400 `parse_error` (docs/api.md).

JSON's `\\ud800` escapes decode to lone surrogates, which have no UTF-8 form.
In a value, the field refuses it by name (chat/inputs.py `TextField`); in a
key, nothing could name it back (an "unknown field" error echoing the key
cannot be encoded), so a body with such a key is a parse error too.
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
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply.") from None
        if not _keys_encodable(data):
            raise ParseError("JSON parse error - a key is not valid Unicode (a lone surrogate).")
        return data


def _keys_encodable(data: Any) -> bool:
    """Whether every object key, at any depth, has a UTF-8 form (walked without recursion)."""
    pending = [data]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                try:
                    key.encode("utf-8")
                except UnicodeEncodeError:
                    return False
                pending.append(value)
        elif isinstance(item, list):
            pending.extend(item)
    return True
