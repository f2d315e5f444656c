"""The apps' boundaries: the models match their migrations, and `tools` never imports `chat`.

`tools` is the tool framework (the registry, the executor, resources); `chat`
is the application built on it. The one reference the other way is a lazy
foreign key, `Resource.created_by_execution` -> `chat.ToolExecution`, which
DESIGN.md names: a resource records the call that created it, and the two
apps' initial migrations are split by Django to allow it (docs/tools.md):
the first migration of `tools` names `chat`'s first as a dependency, and
imports nothing from it. The direction of imports inside `chat` is
import-linter's contracts in pyproject.toml, run by `make lint`.
"""

from __future__ import annotations

import ast
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_every_model_change_has_its_migration():
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_the_tools_package_does_not_import_chat():
    offenders = []
    for path in sorted((ROOT / "tools").rglob("*.py")):
        if "test_" in path.name:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [
                f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "chat"
            ]
    assert offenders == []


def _calls_in(path: Path) -> list[tuple[int, str]]:
    """Each call of a provider's `stream` or of the ModelCall constructor in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "stream":
            found.append((node.lineno, "calls a model (.stream)"))
        elif isinstance(func, ast.Name) and func.id == "ModelCall":
            found.append((node.lineno, "makes a ModelCall row"))
        elif isinstance(func, ast.Attribute) and func.attr == "create":
            owner = func.value
            if (
                isinstance(owner, ast.Attribute)
                and owner.attr == "objects"
                and isinstance(owner.value, ast.Name)
                and owner.value.id == "ModelCall"
            ):
                found.append((node.lineno, "makes a ModelCall row"))
    return found


def test_one_module_calls_a_model_and_one_makes_its_audit_row():
    """Whoever asks (a turn's step, the follow-ups), chat/engine/model_calls.py calls the model,
    and the ledger (chat/engine/ledger/model_calls.py) makes its audit row.

    The providers themselves (chat/llm/) stream; everything else in the
    application asks `model_call`, which records every call the same way.
    """
    pipeline = ROOT / "chat" / "engine" / "model_calls.py"
    ledger = ROOT / "chat" / "engine" / "ledger" / "model_calls.py"
    offenders = []
    for package in ("chat", "tools", "project"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path in (pipeline, ledger) or (ROOT / "chat" / "llm") in path.parents:
                continue
            offenders += [
                f"{path.relative_to(ROOT)}:{line}: {what}" for line, what in _calls_in(path)
            ]
    assert offenders == []
    assert {what for _, what in _calls_in(pipeline)} == {"calls a model (.stream)"}
    assert {what for _, what in _calls_in(ledger)} == {"makes a ModelCall row"}
