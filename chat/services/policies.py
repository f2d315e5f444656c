"""Writing the tool policies: one rule at a time (the REST API, the admin), or all at once (a file).

A rule is validated by `chat.inputs.ToolPolicyInput` whichever way it comes
(a budget limit by `BudgetLimitInput`), so the API's 400 and the file
loader's error name the same key. A file is loaded whole or not at all: one
bad entry, and the stored rules and limits stay as they were. Its `rules`
replace the rules and its `limits` the budget limits; a key it leaves out
leaves those as they are (docs/governance.md has the format).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from django.db import transaction

from chat.exceptions import InvalidInput
from chat.inputs import BudgetLimitInput, StrictInputSerializer, ToolPolicyInput, flatten_errors
from chat.models import BudgetLimit, ToolPolicy
from chat.services.budgets import limit_create, limits_dump

# The keys a policies file may have, and what checks each entry of them.
_FILE_KEYS: dict[str, type[StrictInputSerializer]] = {
    "rules": ToolPolicyInput,
    "limits": BudgetLimitInput,
}


@dataclasses.dataclass(frozen=True)
class Loaded:
    """What a policies file replaced: the rules and the limits (None: left as they were)."""

    rules: list[ToolPolicy] | None
    limits: list[BudgetLimit] | None


def policy_create(
    *, tools: list[str], decision: str, note: str = "", users: Any = (), groups: Any = ()
) -> ToolPolicy:
    """Store a new rule; it decides from the next claim of every covered person's runs."""
    with transaction.atomic():
        policy = ToolPolicy.objects.create(tools=tools, decision=decision, note=note)
        policy.users.set(users)
        policy.groups.set(groups)
    return policy


def policy_update(*, policy: ToolPolicy, **fields: Any) -> ToolPolicy:
    """Change a rule's fields (those given); the same checks as a new one's."""
    with transaction.atomic():
        people = {key: fields.pop(key) for key in ("users", "groups") if key in fields}
        for name, value in fields.items():
            setattr(policy, name, value)
        policy.save()
        for key, value in people.items():
            getattr(policy, key).set(value)
    return policy


def policy_delete(*, policy: ToolPolicy) -> None:
    """Remove a rule. The calls it decided keep its id in their record."""
    policy.delete()


def policy_data(policy: ToolPolicy) -> dict[str, Any]:
    """A rule as the file and the API write it: tools, users, groups, decision, note."""
    return {
        "tools": list(policy.tools),
        "users": sorted(user.get_username() for user in policy.users.all()),
        "groups": sorted(group.name for group in policy.groups.all()),
        "decision": policy.decision,
        "note": policy.note,
    }


def policies_dump() -> dict[str, Any]:
    """Every rule and every budget limit, oldest first, in the policies file's format."""
    rules = ToolPolicy.objects.prefetch_related("users", "groups").order_by("id")
    return {"rules": [policy_data(policy) for policy in rules], "limits": limits_dump()}


def policies_replace(*, document: Any) -> Loaded:
    """Replace the rules and the limits a file has, whole or not at all.

    InvalidInput names the entry and the key at fault (`limits[1].period`).
    """
    checked = {key: _checked(key, entries) for key, entries in _file_parts(document).items()}
    with transaction.atomic():
        rules = limits = None
        if "rules" in checked:
            ToolPolicy.objects.all().delete()
            rules = [policy_create(**data) for data in checked["rules"]]
        if "limits" in checked:
            BudgetLimit.objects.all().delete()
            limits = [limit_create(**data) for data in checked["limits"]]
    return Loaded(rules, limits)


def _checked(key: str, entries: list[Any]) -> list[dict[str, Any]]:
    checked = []
    for index, entry in enumerate(entries):
        given = _FILE_KEYS[key](data=entry)
        if not given.is_valid():
            field, messages = next(flatten_errors(given.errors), ("", ["Invalid entry."]))
            where = f"{key}[{index}]" + (f".{field}" if field else "")
            raise InvalidInput(f"{where}: {messages[0]}", field=where)
        checked.append(dict(given.validated_data))
    return checked


def _file_parts(document: Any) -> dict[str, list[Any]]:
    if not isinstance(document, Mapping):
        raise InvalidInput('A policies file is a JSON object: {"rules": [...], "limits": [...]}.')
    unknown = sorted(set(document) - set(_FILE_KEYS))
    if unknown:
        raise InvalidInput(
            f"{unknown[0]}: unknown key (a policies file has rules and limits).", field=unknown[0]
        )
    for key in document:
        if not isinstance(document[key], list):
            raise InvalidInput(f"{key}: must be a list.", field=key)
    return dict(document)
