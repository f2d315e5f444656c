"""`manage.py tool_policies load|dump FILE`: the rules kept in a file, replaced whole or not at all."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command

from chat.models import ToolPolicy
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

RULES = {
    "rules": [
        {"tools": ["delete_*"], "groups": ["ops"], "decision": "allow", "note": "ops may"},
        {"tools": ["delete_*"], "decision": "ask"},
        {"tools": ["tracker__*"], "users": ["alice"], "decision": "deny"},
    ]
}


@pytest.fixture
def people():
    UserFactory(username="alice")
    Group.objects.create(name="ops")


def write(tmp_path, document) -> str:
    path = tmp_path / "policies.json"
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)
    return str(path)


def test_load_replaces_the_rules_and_dump_writes_them_back_the_same(tmp_path, people):
    ToolPolicy.objects.create(tools=["old"], decision="deny")
    call_command("tool_policies", "load", write(tmp_path, RULES))
    assert list(ToolPolicy.objects.values_list("tools", "decision")) == [
        (["delete_*"], "allow"),
        (["delete_*"], "ask"),
        (["tracker__*"], "deny"),
    ]
    out = tmp_path / "out.json"
    call_command("tool_policies", "dump", str(out))
    dumped = json.loads(out.read_text())
    assert dumped == {
        "rules": [
            {"users": [], "groups": [], "note": "", **rule} | {"note": rule.get("note", "")}
            for rule in RULES["rules"]
        ],
        "limits": [],
    }
    call_command("tool_policies", "load", str(out))  # a dump loads as it was
    assert ToolPolicy.objects.count() == 3


def test_a_file_with_limits_replaces_the_budget_limits_and_leaves_out_keys_alone(
    tmp_path, people, capsys
):
    from chat.models import BudgetLimit

    ToolPolicy.objects.create(tools=["kept"], decision="deny")
    BudgetLimit.objects.create(period="day", tokens=1)
    limits = {"limits": [{"groups": ["ops"], "period": "month", "cost_usd": 20, "hard": False}]}
    call_command("tool_policies", "load", write(tmp_path, limits))
    assert "Loaded 1 budget limit." in capsys.readouterr().err
    assert list(ToolPolicy.objects.values_list("tools", flat=True)) == [["kept"]]
    (limit,) = BudgetLimit.objects.all()
    assert (limit.period, float(limit.cost_usd), limit.hard) == ("month", 20.0, False)
    assert [group.name for group in limit.groups.all()] == ["ops"]


@pytest.mark.parametrize(
    ("document", "said"),
    [
        ({"rules": [RULES["rules"][0], {"tools": ["x"], "decision": "nope"}]}, "rules[1].decision"),
        ({"rules": [{"tools": ["x"], "users": ["bob"], "decision": "deny"}]}, "rules[0].users"),
        ({"rules": [{"tools": [], "decision": "deny"}]}, "rules[0].tools"),
        ({"rules": [{"tool": ["x"], "decision": "deny"}]}, "rules[0].tool"),
        ({"rules": {"tools": ["x"]}}, "rules: must be a list"),
        ({"limits": {}}, "limits: must be a list"),
        (
            {"rules": [], "limits": [{"period": "day", "tokens": 1, "seconds": 5}]},
            "limits[0].seconds",
        ),
        ({"limits": [{"period": "day"}]}, "limits[0].tokens: A limit caps one of"),
        ({"rulez": []}, "rulez: unknown key"),
        ([], "JSON object"),
        ("{not json", "not a JSON file"),
    ],
)
def test_a_bad_file_is_refused_whole_naming_the_entry_and_key(tmp_path, people, document, said):
    kept = ToolPolicy.objects.create(tools=["calculator"], decision="deny")
    with pytest.raises(CommandError) as refused:
        call_command("tool_policies", "load", write(tmp_path, document))
    assert said in str(refused.value)
    assert list(ToolPolicy.objects.all()) == [kept]  # the stored rules stay as they were


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(CommandError, match="No such file"):
        call_command("tool_policies", "load", str(tmp_path / "missing.json"))
