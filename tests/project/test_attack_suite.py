"""The attack suite's table names tests that exist: a renamed test cannot drop out of it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.attack_suite import ATTACKS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("pattern", [pattern for listed in ATTACKS.values() for pattern in listed])
def test_every_pattern_of_the_attack_suite_names_a_test(pattern):
    path, _, name = pattern.partition("::")
    source = (ROOT / path).read_text()
    tests = re.findall(r"^(?:async )?def (test_\w+)", source, flags=re.MULTILINE)
    assert any(name in test for test in tests), f"{pattern} matches no test"


def test_security_md_names_every_category():
    text = (ROOT / "docs" / "security.md").read_text()
    for category in ATTACKS:
        assert category in text, category
