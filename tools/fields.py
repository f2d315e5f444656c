"""Model fields that can store any text a model, a tool or a user sends.

PostgreSQL refuses NUL in text and JSON columns, and no UTF-8 encoder takes a
lone surrogate (JSON's "\\ud800" decodes to one). Either would fail the write
(a DataError, a UnicodeEncodeError) and leave a run stuck or failed. These
fields replace both with U+FFFD, on every path into the database (save,
create, bulk_create and QuerySet.update), so the rule lives in one place for
every writer. The replacement character says where something was dropped.

`storable_json` recurses once per level of nesting, as `json.dumps` and
jsonschema do: JSON a client sends is refused at the door when it nests more
than `MAX_JSON_DEPTH` levels (`too_deep`), so that none of them meets
Python's recursion limit on its way in.
"""

from __future__ import annotations

import re
from typing import Any

from django.db import models

REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# Far deeper than any tool schema or request option means; far below the recursion limit.
MAX_JSON_DEPTH = 64


def storable_text(value: str) -> str:
    """The text with NUL and surrogate code points replaced by U+FFFD."""
    return _UNSTORABLE.sub(REPLACEMENT, value) if _UNSTORABLE.search(value) else value


def storable_json(value: Any) -> Any:
    """A JSON value with every string (keys too) made storable.

    Values with nothing to replace come back as they are, not copied: this runs
    on every JSON write (each run event), and almost nothing needs it.
    """
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        cleaned = {storable_text(str(k)): storable_json(v) for k, v in value.items()}
        same = len(cleaned) == len(value) and all(
            k is k2 and v is v2
            for (k, v), (k2, v2) in zip(value.items(), cleaned.items(), strict=True)
        )
        return value if same else cleaned
    if isinstance(value, list | tuple):
        items = [storable_json(item) for item in value]
        return value if all(a is b for a, b in zip(value, items, strict=True)) else items
    return value


def too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a JSON value nests arrays and objects more than `limit` deep (walked, not recursed)."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if not isinstance(item, list | tuple):
            continue
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in item)
    return False


def deep_field(
    body: dict[str, Any], *, envelopes: dict[str, int] | None = None, skip: tuple[str, ...] = ()
) -> str | None:
    """The first field of `body` that nests more than `MAX_JSON_DEPTH` levels below itself.

    `envelopes` allows a field the levels its own structure adds before what is
    counted (a tool list's item and its function, above the parameters).
    """
    for key, value in body.items():
        if key in skip:
            continue
        if too_deep(value, MAX_JSON_DEPTH + (envelopes or {}).get(key, 0)):
            return str(key)
    return None


class _Storable:
    """Cleans the value on its way to the database, and on the instance being saved."""

    clean_value: Any = staticmethod(storable_text)

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)  # type: ignore[misc]
        if value is None:
            return None
        return type(self).clean_value(value) if self._needs_cleaning(value) else value

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        value = super().pre_save(model_instance, add)  # type: ignore[misc]
        if value is not None and self._needs_cleaning(value):
            value = type(self).clean_value(value)
            setattr(model_instance, self.attname, value)  # type: ignore[attr-defined]
        return value

    def _needs_cleaning(self, value: Any) -> bool:
        return isinstance(value, str)


class StorableTextField(_Storable, models.TextField):  # type: ignore[type-arg]
    """A TextField that stores NUL and lone surrogates as U+FFFD."""


class StorableCharField(_Storable, models.CharField):  # type: ignore[type-arg]
    """A CharField that stores NUL and lone surrogates as U+FFFD."""


class StorableJSONField(_Storable, models.JSONField):
    """A JSONField whose strings (keys and values) store NUL and lone surrogates as U+FFFD."""

    clean_value = staticmethod(storable_json)

    def _needs_cleaning(self, value: Any) -> bool:
        return True
