"""README.md stays true to the code: its configuration table lists every setting."""

from __future__ import annotations

import re
from pathlib import Path

from tests.project.test_compose import settings_variables

ROOT = Path(__file__).resolve().parents[2]


def configuration_table() -> set[str]:
    """The variables named in the first column of README's configuration table."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", section, flags=re.MULTILINE))


def test_the_configuration_table_lists_every_variable_the_settings_read():
    documented = configuration_table()
    assert not settings_variables() - documented, "undocumented in README.md"
    assert not documented - settings_variables(), "documented but never read"


def test_the_readme_starts_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    first_section = text.split("\n## ", 2)[1]
    assert first_section.startswith("Two commands")
    assert "make run" in first_section
    assert "make test" in first_section
    assert "http://127.0.0.1:8000" in first_section
    assert "`demo` / `toolchat-demo`" in first_section
