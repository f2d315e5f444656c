"""What comments and docstrings name: files that exist, behaviour rather than issues.

A docstring that sends the reader to `chat/services/turn.py` after the code
moved to `chat/engine/` is worse than none. The application's comments and
docstrings (chat/, tools/, project/) are read for repository paths (those
under chat/, tools/, project/, static/, templates/, docs/, tests/, bench/);
each must exist, as a file or a folder of the repository, or as a template
name under templates/; and a name given with a Python file's path
(chat/engine/lease.py `run_claim`) must be one that file has. String
literals in code are not read: they are template names, URLs and MCP
methods, checked by the tests of what uses them.

A test says what it checks in words a reader can follow without the issue
tracker: no comment or docstring under tests/ names an issue number.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("chat", "tools", "project")
ROOTS = ("chat", "tools", "project", "static", "templates", "docs", "tests", "bench")
# A path starts at a top-level folder (not inside a URL or a longer path) and ends
# on a name character, so that a sentence's full stop is not part of it.
PATH = re.compile(
    rf"(?<![\w/.\-])(?:{'|'.join(ROOTS)})/(?:[\w.\-]+/)*(?:[\w.\-]*\w)?",
)


def _docstrings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(
            node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        ) and (text := ast.get_docstring(node, clean=False)):
            first = node.body[0]
            yield first.lineno, text


def _comments(source: str) -> Iterator[tuple[int, str]]:
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


ISSUE = re.compile(r"\bissues? #?\d+", re.IGNORECASE)


def _texts(source: str) -> list[tuple[int, str]]:
    return [*_docstrings(ast.parse(source)), *_comments(source)]


def named_paths(source: str) -> Iterator[tuple[int, str]]:
    """(line, path) for each repository path named in the source's comments and docstrings."""
    for line, text in _texts(source):
        for match in PATH.finditer(text):
            yield line + text.count("\n", 0, match.start()), match.group()


def exists(path: str) -> bool:
    return (ROOT / path).exists() or (ROOT / "templates" / path).exists()


def test_the_finder_reads_comments_and_docstrings_not_code():
    source = '''"""Moved: see chat/engine/run.py and chat/services/turn.py."""

TEMPLATE = "chat/index.html"  # rendered, not named


def f():
    """Reads static/js/state.js, https://example.org/chat/x.py and /srv/tools/y.py."""
    # The rules: docs/turn-engine.md.
'''
    assert [path for _, path in named_paths(source)] == [
        "chat/engine/run.py",
        "chat/services/turn.py",
        "static/js/state.js",
        "docs/turn-engine.md",
    ]
    assert exists("chat/engine/run.py")
    assert exists("chat/index.html")  # a template's name
    assert not exists("chat/services/turn.py")


def test_every_path_a_comment_or_docstring_names_exists():
    missing = []
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, named in named_paths(path.read_text()):
                if not exists(named):
                    missing.append(f"{path.relative_to(ROOT)}:{line}: {named}")
    assert missing == []


# A Python file's path, then the name of something in it: "chat/engine/lease.py `run_claim`".
NAMED_IN = re.compile(r"(?<![\w/.\-])((?:[\w.\-]+/)+[\w.\-]+\.py)\)?,?\s+`(\w+)`")


def names_in_files(source: str) -> Iterator[tuple[int, str, str]]:
    """(line, path, name) for each name a comment or docstring places in a Python file."""
    for line, text in _texts(source):
        for match in NAMED_IN.finditer(text.replace("#", " ")):
            yield line + text.count("\n", 0, match.start()), match.group(1), match.group(2)


def test_the_finder_reads_the_names_given_with_a_path():
    source = '''"""The lease (chat/engine/lease.py `run_claim`), and chat/api/base.py
`TextField`."""
# see chat/engine/finish.py, `run_end`
'''
    assert list(names_in_files(source)) == [
        (1, "chat/engine/lease.py", "run_claim"),
        (1, "chat/api/base.py", "TextField"),
        (3, "chat/engine/finish.py", "run_end"),
    ]


def test_every_name_given_with_a_files_path_is_in_that_file():
    wrong = []
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, named, name in names_in_files(path.read_text()):
                target = ROOT / named
                if target.exists() and not re.search(rf"\b{name}\b", target.read_text()):
                    wrong.append(f"{path.relative_to(ROOT)}:{line}: {named} `{name}`")
    assert wrong == []


def test_no_test_names_an_issue_number():
    assert ISSUE.search("The chat page's rough edges (issue 13).")
    assert not ISSUE.search("Search the issues for anything.")
    named = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for line, text in _texts(path.read_text())
        if ISSUE.search(text)
    ]
    assert named == []
