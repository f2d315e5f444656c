"""`tools` is the framework `chat` is built on: nothing in it names `chat`.

The import contract (pyproject.toml, `make lint`) holds for imports; this holds
for the rest, the strings a model or a migration names another app by.
"""

from __future__ import annotations

import re
from pathlib import Path

import tools

ROOT = Path(tools.__file__).resolve().parent


def test_no_module_or_migration_of_tools_names_the_chat_app():
    naming = re.compile(r"""["']chat(?:\.|["'])""")
    found = [
        f"{path.relative_to(ROOT.parent)}:{number}: {line.strip()}"
        for path in sorted(ROOT.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if naming.search(line)
    ]
    assert found == []


def test_a_resource_names_what_created_it_through_the_setting(settings):
    from tools.models import Resource

    target = Resource._meta.get_field("created_by_execution").related_model
    assert f"{target._meta.app_label}.{target.__name__}" == settings.TOOLS_EXECUTION_MODEL
