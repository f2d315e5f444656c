"""Docstring parsing: the summary paragraph and the per-parameter `Args:` descriptions."""

from __future__ import annotations

import inspect
import re

_ARGS_HEADERS = {"args:", "arguments:", "parameters:", "params:"}
_SECTION_HEADER_RE = re.compile(
    r"^(args|arguments|parameters|params|returns?|yields?|raises|examples?|notes?|"
    r"warnings?|see also|todo|attributes|keyword args|keyword arguments|other parameters)"
    r":\s*$",
    re.IGNORECASE,
)
_ARG_LINE_RE = re.compile(r"^\*{0,2}([A-Za-z_][A-Za-z0-9_]*)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def first_paragraph(doc: str) -> str:
    """The docstring's first paragraph, on one line (a section header ends it)."""
    lines: list[str] = []
    for line in inspect.cleandoc(doc).splitlines():
        stripped = line.strip()
        if not stripped or _SECTION_HEADER_RE.match(stripped):
            if lines or _SECTION_HEADER_RE.match(stripped):
                break
            continue
        lines.append(stripped)
    return " ".join(lines)


def parse_args_section(doc: str) -> dict[str, str]:
    """Per-parameter descriptions from a Google-style `Args:` section."""
    lines = inspect.cleandoc(doc).splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().lower() in _ARGS_HEADERS), None)
    if start is None:
        return {}
    header_indent = _indent(lines[start])
    entries: dict[str, list[str]] = {}
    current: str | None = None
    entry_indent: int | None = None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        indent = _indent(line)
        if indent <= header_indent:
            break
        if entry_indent is None:
            entry_indent = indent
        if indent <= entry_indent:
            match = _ARG_LINE_RE.match(line.strip())
            current = match.group(1) if match else None
            if current is not None and match is not None:
                entries[current] = [match.group(2).strip()]
        elif current is not None:
            entries[current].append(line.strip())
    return {name: " ".join(part for part in parts if part) for name, parts in entries.items()}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())
