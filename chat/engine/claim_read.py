"""A claimed run as the run loop reads it: the run, its conversation and owner, its last position.

Every run is claimed once at least (chat/engine/ledger/runs.py `run_claim`), and the
ORM's `select_related` with an annotated subquery cost more to build than the
database took to answer it. Here the statement is written once, and the rows
become instances as the ORM would make them (each field's converters, then
`from_db`). On PostgreSQL the claim of a queued run and this read are one
statement (`claimed_read`); elsewhere, and for a take-over, the claim is its
own UPDATE and the read follows it (`claimed_reread`).
"""

from __future__ import annotations

import functools
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Field

from chat.engine.run_limits import run_used_keep
from chat.models import Conversation, Run, ToolPolicy
from chat.policies import policies_keep
from chat.statements import covering_column, model_columns, row_instance

# What follows a claim: the run, its conversation, the conversation's owner, the
# position of the conversation's last message (superseded ones too): a regenerated
# answer goes after the answer it replaces (chat/engine/run.py), and the tool
# policies that cover the owner (chat/policies.py), as one JSON array, and, for a run
# under budget limits, the tokens and dollars its model calls used so far
# (chat/engine/run_limits.py), as `[tokens, dollars]`.
_READ = """
SELECT {run}, {conversation},{owner}
    (SELECT position FROM chat_message WHERE conversation_id = claimed.conversation_id
     ORDER BY position DESC LIMIT 1),
    {policies},
    CASE WHEN claimed.budget IS NULL THEN NULL ELSE
        (SELECT {pair}(COALESCE(SUM(mc.prompt_tokens), 0) + COALESCE(SUM(mc.completion_tokens), 0),
                       SUM(mc.cost_usd))
         FROM chat_modelcall AS mc WHERE mc.run_id = claimed.id) END
FROM {source}
JOIN chat_conversation ON chat_conversation.id = claimed.conversation_id
{owner_join}
"""


def claimed_read(claim: str, params: list[Any]) -> Run | None:
    """Claim a run and read it, in one statement; None if the claim took no row.

    `claim` is a data-modifying WITH named `claimed` (chat/engine/ledger/runs.py
    `run_claim`, which writes the claim), `params` its values. PostgreSQL only.
    """
    return _read(claim + _statement("claimed"), params)


def claimed_reread(run_id: Any) -> Run:
    """The run this worker claimed (with its own UPDATE), as `claimed_read` gives it."""
    params = [prepared("id", run_id)]
    run = _read(_statement("chat_run AS claimed") + " WHERE claimed.id = %s", params)
    if run is None:
        raise Run.DoesNotExist(f"run {run_id} is gone")
    return run


def prepared(name: str, value: Any) -> Any:
    """`value` as the database takes it for the run's field `name`."""
    field: Field[Any, Any] = Run._meta.get_field(name)  # type: ignore[assignment]
    return field.get_db_prep_value(value, connection)


@functools.cache
def _statement(source: str) -> str:
    owner, quote = get_user_model(), connection.ops.quote_name
    table = quote(owner._meta.db_table)
    joined = _owner_joined()
    return _READ.format(
        run=model_columns(Run, "claimed"),
        conversation=model_columns(Conversation),
        owner=f" {model_columns(owner)}," if joined else "",
        source=source,
        policies=_policies_column(),
        pair="json_build_array" if connection.vendor == "postgresql" else "json_array",
        owner_join=(
            f"JOIN {table} ON {table}.{quote(owner._meta.pk.column)} = chat_conversation.owner_id"
            if joined
            else ""
        ),
    )


def _policies_column() -> str:
    """The rules covering the conversation's owner, as `[[id, tools, decision, note], ...]`.

    The same rules as chat/policies.py `policies_for`, read with the claim: no
    query of its own, whatever the number of rules.
    """
    fields = ("id", "tools", "decision", "note")
    return covering_column(ToolPolicy, fields, "chat_conversation.owner_id")


def _owner_joined() -> bool:
    """Whether the user model's columns are all in its own table, to be read with the claim.

    Django's user is; one that inherits another concrete model's table is read
    when it is first used instead.
    """
    return not get_user_model()._meta.parents


def _read(sql: str, params: list[Any]) -> Run | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    values = iter(row)
    run: Run = row_instance(Run, "claimed", values)
    conversation = row_instance(Conversation, "chat_conversation", values)
    if _owner_joined():
        owner_model = get_user_model()
        owner = row_instance(owner_model, owner_model._meta.db_table, values)
        Conversation._meta.get_field("owner").set_cached_value(conversation, owner)
    Run._meta.get_field("conversation").set_cached_value(run, conversation)
    vars(run)["last_position"] = next(values)  # as the ORM sets an annotation
    policies_keep(run, next(values))
    run_used_keep(run, next(values))
    return run
