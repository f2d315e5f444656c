"""A replay is a source, not a branch: the engine reads no run's replay fields.

Where a run's steps get their tools' results (the tool, or the original's
record) and their steps (the model's own, or the original's) is read once from
the run, as `Run.sources` (chat/models/runs.py), and the engine asks that. Only
the two sources of a replay read the fields themselves: the recorded tools
(chat/engine/replay_tools.py) and the forced steps (chat/engine/forced_replay.py),
which look the original up.
"""

from __future__ import annotations

import ast
import uuid

import pytest

from chat.models import ReplayMode, ReplayTools, Run, RunSources, StepSource, ToolSource
from tests.chat.engine.writers import ROOT

SOURCES = {
    ROOT / "chat" / "engine" / "replay_tools.py",
    ROOT / "chat" / "engine" / "forced_replay.py",
}
_FIELDS = {"replay_of", "replay_of_id", "replay_tools", "replay_mode"}
_CHOICES = {"ReplayMode", "ReplayTools"}


def _reads(path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Attribute) and node.attr in _FIELDS:
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in _CHOICES:
            found.append(f"{node.lineno}: {node.id}")
        elif isinstance(node, ast.keyword) and node.arg in _FIELDS:
            found.append(f"{node.lineno}: {node.arg}=")
        elif isinstance(node, ast.Constant) and node.value in _FIELDS:
            found.append(f"{node.lineno}: {node.value!r}")
    return found


def test_no_module_of_the_engine_but_a_replay_source_reads_a_replay_field():
    engine = sorted((ROOT / "chat" / "engine").rglob("*.py"))
    assert len(engine) >= 25
    assert any(path.parent.name == "ledger" for path in engine)
    readers = {
        str(path.relative_to(ROOT)): reads
        for path in engine
        if path not in SOURCES and (reads := _reads(path))
    }
    assert readers == {}
    # The sources themselves do read them: the walk would see a reader.
    assert all(_reads(path) for path in SOURCES)


@pytest.mark.parametrize(
    ("tools", "mode", "expected"),
    [
        ("", "", RunSources()),
        (
            ReplayTools.RECORDED,
            ReplayMode.FREE,
            RunSources(tools=ToolSource.RECORDED, one_model=True, replay=True),
        ),
        (ReplayTools.LIVE, ReplayMode.FREE, RunSources(one_model=True, replay=True)),
        (
            ReplayTools.RECORDED,
            ReplayMode.FORCED,
            RunSources(
                tools=ToolSource.RECORDED, steps=StepSource.FORCED, one_model=True, replay=True
            ),
        ),
    ],
)
def test_a_runs_sources_follow_its_replay_fields(tools, mode, expected):
    replay_of_id = uuid.uuid4() if tools else None
    run = Run(replay_of_id=replay_of_id, replay_tools=tools, replay_mode=mode)
    assert run.sources == expected
    assert run.sources.tools_run is (expected.tools is ToolSource.RUN)
