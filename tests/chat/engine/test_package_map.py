"""The engine's map (chat/engine/__init__.py) names each of its modules (and packages), once."""

from __future__ import annotations

import re
from pathlib import Path

import chat.engine

PACKAGE = Path(chat.engine.__file__).parent
ENTRY = re.compile(r"^- `(\w+)`(?: \(a package\))?:", re.MULTILINE)


def test_the_map_names_every_module_of_the_engine_once():
    named = ENTRY.findall(chat.engine.__doc__ or "")
    modules = sorted(
        [path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__"]
        + [path.parent.name for path in PACKAGE.glob("*/__init__.py")]
    )
    assert sorted(named) == modules
