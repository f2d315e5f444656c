"""The turn's inserts and updates as statements built once, with the ORM's own field hooks.

A turn stores a dozen rows one at a time, each before the next step starts
(the design: a worker that dies leaves nothing half-done). `Model.save` and
`QuerySet.update` build their SQL anew every time, which cost more CPU than
the database took to run it (docs/performance.md). Here the SQL of each model
(and each set of updated columns) is built once per process, and each value
goes through the field as the ORM sends it: `pre_save` on insert (auto_now,
and the storable fields' cleaning of NUL and lone surrogates), then
`get_db_prep_save`. What the ORM adds beyond that, `pre_save` and `post_save`
signals, nothing in toolchat listens to for these models.
"""

from __future__ import annotations

import functools
from typing import Any

from django.db import connection
from django.db.models import Field, Model


@functools.cache
def model_columns(model: type[Model], alias: str | None = None) -> str:
    """The model's columns, each named, for a hand-written statement's SELECT or RETURNING.

    Not `*`: a prepared statement whose result gains a column (a migration
    run while the app goes on) fails until its connection drops it, and
    psycopg keeps a pooled connection's for as long as the connection lives.
    """
    quote = connection.ops.quote_name
    table = quote(alias or model._meta.db_table)
    return ", ".join(f"{table}.{quote(field.column)}" for field in model._meta.concrete_fields)


def row_insert(instance: Model) -> None:
    """INSERT a new row as `instance.save(force_insert=True)` would; the instance is then saved."""
    model = type(instance)
    sql, fields = _insert(model, connection.vendor)
    values = [
        field.get_db_prep_save(field.pre_save(instance, True), connection) for field in fields
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
    instance._state.adding = False
    instance._state.db = connection.alias


def rows_update(model: type[Model], where: dict[str, Any], **values: Any) -> int:
    """UPDATE the rows whose columns equal `where` with plain `values`, as `QuerySet.update`; the count."""
    assert None not in where.values(), "a NULL is matched by IS NULL, not by ="
    sql, fields, matched = _update(model, tuple(values), tuple(where), connection.vendor)
    params = [
        *(
            field.get_db_prep_save(value, connection)
            for field, value in zip(fields, values.values(), strict=True)
        ),
        *(
            field.get_db_prep_value(value, connection)
            for field, value in zip(matched, where.values(), strict=True)
        ),
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


@functools.cache
def _insert(model: type[Model], vendor: str) -> tuple[str, list[Field[Any, Any]]]:
    quote = connection.ops.quote_name
    fields: list[Field[Any, Any]] = list(model._meta.concrete_fields)
    columns = ", ".join(quote(field.column) for field in fields)
    marks = ", ".join(["%s"] * len(fields))
    return f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({marks})", fields  # noqa: S608


@functools.cache
def _update(
    model: type[Model], names: tuple[str, ...], where: tuple[str, ...], vendor: str
) -> tuple[str, list[Field[Any, Any]], list[Field[Any, Any]]]:
    quote = connection.ops.quote_name
    fields: list[Field[Any, Any]] = [model._meta.get_field(name) for name in names]  # type: ignore[misc]
    matched: list[Field[Any, Any]] = [model._meta.get_field(name) for name in where]  # type: ignore[misc]
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in fields)
    conditions = " AND ".join(f"{quote(field.column)} = %s" for field in matched)
    table = quote(model._meta.db_table)
    return f"UPDATE {table} SET {assignments} WHERE {conditions}", fields, matched  # noqa: S608
