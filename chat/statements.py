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
from collections.abc import Iterator
from typing import Any

from django.contrib.auth import get_user_model
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


def row_instance(model: type[Model], alias: str, values: Iterator[Any]) -> Any:
    """The model's instance from the next of `values` (its `model_columns(model, alias)` as
    read), each converted as the ORM converts it, then `from_db`."""
    fields = list(model._meta.concrete_fields)
    taken = [next(values) for _ in fields]
    for index, field in enumerate(fields):
        column = field.get_col(alias)  # a foreign key's is its target's (a UUID)
        for converter in [
            *connection.ops.get_db_converters(column),
            *column.get_db_converters(connection),
        ]:
            taken[index] = converter(taken[index], column, connection)
    return model.from_db(connection.alias, [field.attname for field in fields], taken)


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


def covering_condition(model: type[Model], alias: str, owner: str) -> str:
    """SQL true when the row `alias` of `model` (a `Covering`: a rule, a limit) covers `owner`.

    `owner` is the SQL of a user's id. A row covers everyone when it names no
    user and no group, else its users and the members of its groups: the same
    rows as the ORM's `Exists` filters of chat/policies.py `policies_for`.
    The statement holds the models' own table and column names, quoted, and
    no value.
    """
    quote = connection.ops.quote_name
    people = model.users.through._meta  # type: ignore[attr-defined]
    groups = model.groups.through._meta  # type: ignore[attr-defined]
    own = quote(people.get_field(model._meta.model_name).column)

    def column(meta: Any, name: str) -> str:
        return quote(meta.get_field(name).column)

    def covering(meta: Any, extra: str = "") -> str:
        return (
            f"SELECT 1 FROM {quote(meta.db_table)} AS covering {extra}"  # noqa: S608
            f"WHERE covering.{own} = {alias}.id"
        )

    conditions = [
        f"NOT EXISTS ({covering(people)}) AND NOT EXISTS ({covering(groups)})",
        f"EXISTS ({covering(people)} AND covering.{column(people, 'user')} = {owner})",
    ]
    member = getattr(get_user_model(), "groups", None)
    if member is not None:
        joined = member.through._meta
        join = (
            f"JOIN {quote(joined.db_table)} AS member ON member.{column(joined, 'group')} "
            f"= covering.{column(groups, 'group')} "
        )
        conditions.append(
            f"EXISTS ({covering(groups, join)} AND member.{column(joined, 'user')} = {owner})"
        )
    return "(" + " OR ".join(f"({condition})" for condition in conditions) + ")"


def covering_column(model: type[Model], fields: tuple[str, ...], owner: str) -> str:
    """A subquery column: the rows of `model` covering `owner`, as a JSON array of arrays.

    Each row is `[field, ...]` in the order of `fields` (a JSON field as its
    JSON); NULL when no row covers them. Read with a statement the caller
    makes anyway, it costs no query of its own, whatever the number of rows.
    Unordered: the reader sorts.
    """
    quote = connection.ops.quote_name
    alias = "covered"
    columns = []
    for name in fields:
        field: Field[Any, Any] = model._meta.get_field(name)  # type: ignore[assignment]
        column = f"{alias}.{quote(field.column)}"
        json_typed = field.get_internal_type() == "JSONField"
        columns.append(
            f"json({column})" if json_typed and connection.vendor != "postgresql" else column
        )
    if connection.vendor == "postgresql":
        row, aggregate = f"json_build_array({', '.join(columns)})", "json_agg"
    else:
        row, aggregate = f"json_array({', '.join(columns)})", "json_group_array"
    return (
        f"(SELECT {aggregate}({row}) FROM {quote(model._meta.db_table)} AS {alias} "  # noqa: S608
        f"WHERE {covering_condition(model, alias, owner)})"
    )
