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
