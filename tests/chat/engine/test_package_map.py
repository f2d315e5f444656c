"""chat/engine/__init__.py's map of the package names every module in it, and nothing else.

A newcomer reads the map to find where a run's step is done: a module the
map leaves out is one they cannot find, and a name it keeps after the module
went is one that misleads.
"""

from __future__ import annotations

import re

import chat.engine
from tests.chat.engine.writers import ROOT

ENGINE = ROOT / "chat" / "engine"


def _mapped() -> set[str]:
    doc = chat.engine.__doc__ or ""
    listed = doc[doc.index("The modules (all of them)") :]
    # Each bullet's first name, and the ledger's modules named in its bullet.
    bullets = set(re.findall(r"^- `([a-z_]+)`", listed, re.MULTILINE))
    return bullets | set(re.findall(r"`(ledger\.[a-z_]+)`", listed))


def _modules() -> set[str]:
    found = {path.stem for path in ENGINE.glob("*.py") if path.stem != "__init__"}
    found |= {path.parent.name for path in ENGINE.glob("*/__init__.py")}
    found |= {
        f"{path.parent.name}.{path.stem}"
        for path in ENGINE.glob("*/*.py")
        if path.stem != "__init__"
    }
    return found


def test_the_map_names_every_module_of_the_engine():
    assert sorted(_modules() - _mapped()) == []


def test_the_map_names_no_module_that_is_not_there():
    assert sorted(_mapped() - _modules()) == []
