"""docs/tools.md's MCP example works as written: install the time server, configure it, check it.

The install line puts the newest mcp-server-time beside toolchat, with the
MCP SDK it needs; the environment must stay whole (what `pip check` asks:
every installed requirement met), and `manage.py mcp_servers`, run as the
document writes it with the document's configuration, must print what the
document shows.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.stack import ROOT

DOC = ROOT / "docs" / "tools.md"
# The document runs everything with the project's own interpreter.
VENV_PYTHON = ".venv/bin/python"


def example_blocks() -> list[tuple[str, str]]:
    """The fenced blocks of the MCP worked example, in order: (language, text)."""
    section = DOC.read_text().split("### A worked example", 1)[1].split("\n### ", 1)[0]
    blocks = re.findall(r"^ *```(\w*)\n(.*?)^ *```", section, flags=re.MULTILINE | re.DOTALL)
    return [(language, _dedent(text)) for language, text in blocks]


def _dedent(text: str) -> str:
    lines = text.splitlines()
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    return "\n".join(line[indent:] for line in lines)


def unmet(distribution: str, requirements: list[str]) -> list[str]:
    """What the installed packages leave unmet of these requirements and theirs, all the way down."""
    missing: list[str] = []
    seen: set[str] = set()
    pending = [(distribution, text) for text in requirements]
    while pending:
        needer, text = pending.pop()
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            missing.append(f"{needer} needs {text}: not installed")
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            missing.append(f"{needer} needs {text}: {installed} is installed")
        name = canonicalize_name(requirement.name)
        if name not in seen:
            seen.add(name)
            pending += [(requirement.name, inner) for inner in metadata.requires(name) or []]
    return missing


def test_the_time_server_the_docs_install_and_toolchat_agree_on_the_mcp_sdk():
    (install,) = [text for _, text in example_blocks() if "pip install" in text]
    assert install.strip() == ".venv/bin/pip install mcp-server-time"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # What `pip check` asks of toolchat and of the server installed beside it.
    assert unmet("toolchat", [*project["dependencies"], "mcp-server-time"]) == []


def test_the_docs_config_lists_the_time_servers_tools_with_manage_py_mcp_servers(tmp_path):
    blocks = example_blocks()
    # The file a user copies first works as written, whatever their environment holds.
    config = next(json.loads(text) for language, text in blocks if language == "json")
    servers = config["mcpServers"]
    ((position, commands),) = [
        (index, text) for index, (_, text) in enumerate(blocks) if "manage.py mcp_servers" in text
    ]
    printed = blocks[position + 1][1]

    path = tmp_path / "mcp.json"
    script = commands.replace("$PWD/mcp.json", str(path))
    interpreter = Path(sys.prefix) / "bin" / "python"
    if interpreter != ROOT / VENV_PYTHON:
        # The tests run outside the checkout's .venv: the same commands, with their interpreter.
        script = script.replace(VENV_PYTHON, sys.executable)
        printed = printed.replace(VENV_PYTHON, sys.executable)
        servers["time"]["command"] = sys.executable
    path.write_text(json.dumps({"mcpServers": servers}))
    result = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script],
        cwd=ROOT,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.stdout.strip() == printed.strip()


def test_an_unset_variable_stops_manage_py_with_one_line_naming_the_server_and_the_key(
    tmp_path,
):
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "tracker": {
                        "url": "https://tracker.example.com/mcp",
                        "headers": {"Authorization": "Bearer ${TRACKER_TOKEN}"},
                    }
                }
            }
        )
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "mcp_servers"],
        cwd=ROOT,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp_path),
            "DJANGO_DEBUG": "1",
            "TOOLCHAT_MCP_CONFIG": str(path),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()  # no traceback
    assert "tracker" in line, line
    assert "headers" in line, line
    assert "${TRACKER_TOKEN}" in line, line
