"""Writing the tool policies: one rule at a time (the REST API, the admin), or all at once (a file).

A rule is validated by `chat.inputs.ToolPolicyInput` whichever way it comes,
so the API's 400 and the file loader's error name the same key. A file is
replaced whole or not at all: one bad entry, and the stored rules stay as
they were (docs/governance.md has the format).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction

from chat.exceptions import InvalidInput
from chat.inputs import ToolPolicyInput, flatten_errors
from chat.models import ToolPolicy

# The keys a policies file may have. `limits` (budgets) is named so that a file
# written for a later version is refused with a reason, not half-read.
_FILE_KEYS = frozenset({"rules"})


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
    """Every rule, oldest first, in the policies file's format."""
    rules = ToolPolicy.objects.prefetch_related("users", "groups").order_by("id")
    return {"rules": [policy_data(policy) for policy in rules]}


def policies_replace(*, document: Any) -> list[ToolPolicy]:
    """Replace every rule with a file's, whole or not at all (InvalidInput names entry and key)."""
    entries = _file_entries(document)
    checked = []
    for index, entry in enumerate(entries):
        rule = ToolPolicyInput(data=entry)
        if not rule.is_valid():
            field, messages = next(flatten_errors(rule.errors), ("", ["Invalid entry."]))
            where = f"rules[{index}]" + (f".{field}" if field else "")
            raise InvalidInput(f"{where}: {messages[0]}", field=where)
        checked.append(rule.validated_data)
    with transaction.atomic():
        ToolPolicy.objects.all().delete()
        return [policy_create(**data) for data in checked]


def _file_entries(document: Any) -> list[Any]:
    if not isinstance(document, Mapping):
        raise InvalidInput('A policies file is a JSON object: {"rules": [...]}.')
    unknown = sorted(set(document) - _FILE_KEYS)
    if "limits" in unknown:
        raise InvalidInput(
            "limits: budgets are not in this version of toolchat; remove the key.", field="limits"
        )
    if unknown:
        raise InvalidInput(
            f"{unknown[0]}: unknown key (a policies file has rules).", field=unknown[0]
        )
    rules = document.get("rules", [])
    if not isinstance(rules, list):
        raise InvalidInput("rules: must be a list of rules.", field="rules")
    return rules
