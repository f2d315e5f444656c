"""What the one-writer tests share: reading chat/ as source, and the shape of a query chain.

tests/chat/engine/test_one_status_writer.py, test_one_outcome_writer.py,
test_one_model_call_writer.py and test_one_message_writer.py each name the
writes of one part of a turn's record found outside the ledger
(chat/engine/ledger/); this is the reading they do.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

ROOT = Path(__file__).resolve().parents[3]

# The query methods that write rows.
WRITES = frozenset({"update", "create", "get_or_create", "update_or_create"})


def name_of(node: ast.AST) -> str | None:
    """The last name of `a.b.c` (`c`), of `a` alone, or None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def mentions(node: ast.AST | None, name: str) -> bool:
    """Whether the name `name` appears anywhere in `node`."""
    return node is not None and any(
        isinstance(n, ast.Name) and n.id == name for n in ast.walk(node)
    )


def chain_root(node: ast.AST) -> ast.AST:
    """Where a chain such as `Run.objects.filter(...).update` starts: `Run`."""
    while True:
        if isinstance(node, ast.Attribute):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value
        else:
            return node


def named_row_write(
    call: ast.Call,
    name: str,
    *,
    model: str,
    label: str,
    is_row: Callable[[ast.AST], bool],
    fields: frozenset[str],
) -> str | None:
    """The write of a `model` row a call of `name` makes, said as `label`: its constructor,
    the statements built once (`row_insert`, `rows_update`), or a `setattr` of a column."""
    if name == model:
        return f"{model}(...)"
    if name == "row_insert" and call.args and is_row(call.args[0]):
        return f"row_insert({label})"
    if name == "rows_update" and call.args and name_of(call.args[0]) == model:
        return f"rows_update({model}, ...)"
    if name == "setattr" and len(call.args) == 3 and is_row(call.args[0]):
        field = call.args[1]
        if not isinstance(field, ast.Constant) or field.value in fields:
            return f"setattr({label}, <column>, ...)"
    return None


def sources_outside(ledger: Path) -> list[Path]:
    """Every module of chat/ but its migrations and `ledger` (a module, or a package)."""
    return [
        path
        for path in sorted((ROOT / "chat").rglob("*.py"))
        if "migrations" not in path.relative_to(ROOT).parts
        and path != ledger
        and ledger not in path.parents
    ]


def offenders(ledger: Path, writes: Callable[[str], list[tuple[int, str]]]) -> list[str]:
    """Each write `writes` finds outside `ledger`, as `path:line: what`."""
    return [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in sources_outside(ledger)
        for line, what in writes(path.read_text())
    ]


class WriteFinder(ast.NodeVisitor):
    """What every one-writer test's finder does: stores, calls and SQL text, each asked of it.

    A finder says which stores are writes (`store`), which calls (`written`),
    and which SQL text (`SQL`, named `SQL_SAYS`); each write found is its line
    and what it is, in `found`.
    """

    SQL: ClassVar[re.Pattern[str]]
    SQL_SAYS: ClassVar[str]

    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []

    def store(self, target: ast.AST, value: ast.AST | None, line: int) -> None:
        """Note `target = value` if it writes what the test holds to one writer."""

    def written(self, call: ast.Call) -> str | None:
        """What the call writes, or None."""
        return None

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.store(target, node.value, node.lineno)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.store(node.target, node.value, node.lineno)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.store(node.target, node.value, node.lineno)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        written = self.written(node)
        if written:
            self.found.append((node.lineno, written))
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and self.SQL.search(node.value):
            self.found.append((node.lineno, self.SQL_SAYS))


def writes_in(finder: type[WriteFinder], source: str) -> list[tuple[int, str]]:
    """Each write `finder` finds in `source`: its line and what it is, once each, in order."""
    found = finder()
    found.visit(ast.parse(source))
    return sorted(set(found.found))
