"""A run's status has one writer: chat/engine/ledger/runs.py.

Every other module under chat/ (migrations aside) is read as source, and any
write of `Run.status` in it is named. ToolExecution and ModelCall have a
`status` of their own, which this test leaves alone; a write is a run's when:

- an attribute store `X.status = v` (or `setattr(X, "status", v)`) has a run
  for `X`, by its name (`run`, `…_run`, `….run`, `locked`, `replica`), or
  stores a `RunStatus`;
- a call that writes rows of Run passes `status=`: `Run(...)`, a query's
  `update` / `create` / `get_or_create` / `update_or_create` on a chain that
  starts at `Run` or `type(run)`, or the run's fenced writes (`run_write`,
  `rows_update(Run, ...)`); or a run's `save` / a Run `bulk_update` lists
  "status" among its fields;
- a dict is given a "status" that is a `RunStatus` (`fields["status"] = ...`,
  `{"status": ...}`), or a record whose `status` is annotated `RunStatus`
  turns it into a column (`{"status": self.status}`): what a writer's
  `**fields` would carry;
- SQL text updates chat_run's status (`UPDATE chat_run SET ... status = ...`).

A read (a `filter(status=...)`, a lease's fence `WHERE status = ...`) is not a
write, and names nothing.
"""

from __future__ import annotations

import ast
import re

import pytest

from tests.chat.engine.writers import (
    ROOT,
    WRITES,
    WriteFinder,
    chain_root,
    name_of,
    offenders,
)

LEDGER = ROOT / "chat" / "engine" / "ledger" / "runs.py"

_RUN_NAME = re.compile(r"^(run|.*_run|locked|replica|Run)$")
_FENCED = {"run_write"}
_SQL = re.compile(r"\bUPDATE\s+\"?chat_run\"?\s+SET\b[^;]*?\bstatus\s*=", re.IGNORECASE | re.DOTALL)


def _is_run(node: ast.AST) -> bool:
    name = name_of(node)
    return name is not None and bool(_RUN_NAME.match(name))


def _mentions_run_status(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "RunStatus" for n in ast.walk(node))


def _rows_of_run(func: ast.Attribute) -> bool:
    root = chain_root(func.value)
    if isinstance(root, ast.Name) and root.id == "Run":
        return True
    # type(run).objects...
    return (
        isinstance(root, ast.Call)
        and isinstance(root.func, ast.Name)
        and root.func.id == "type"
        and bool(root.args)
        and _is_run(root.args[0])
    )


def _listed(node: ast.AST | None) -> bool:
    """Whether a literal list, tuple or set of names holds "status"."""
    return isinstance(node, ast.List | ast.Tuple | ast.Set) and any(
        isinstance(e, ast.Constant) and e.value == "status" for e in node.elts
    )


def _is_constant(node: ast.AST | None, value: str) -> bool:
    return isinstance(node, ast.Constant) and node.value == value


def _status_keyword_writes(call: ast.Call) -> str | None:
    """A call that writes rows of Run and passes `status=`."""
    func = call.func
    if isinstance(func, ast.Name):
        if func.id == "Run" or func.id in _FENCED:
            return f"{func.id}(status=...)"
        if func.id == "rows_update" and call.args and name_of(call.args[0]) == "Run":
            return "rows_update(Run, status=...)"
    if isinstance(func, ast.Attribute) and func.attr in WRITES and _rows_of_run(func):
        return f"Run ... .{func.attr}(status=...)"
    return None


def _fields_listed(func: ast.Attribute, call: ast.Call, keywords: dict[str, ast.AST]) -> str | None:
    """A run's `save` or a Run `bulk_update` that lists "status" among its fields."""
    if func.attr == "save" and _is_run(func.value) and _listed(keywords.get("update_fields")):
        return "run.save(update_fields=[..., 'status'])"
    listed = _listed(keywords.get("fields")) or any(_listed(a) for a in call.args[1:])
    if func.attr == "bulk_update" and _rows_of_run(func) and listed:
        return "Run ... .bulk_update([...], ['status'])"
    return None


def _call_writes(call: ast.Call) -> str | None:
    func = call.func
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    if "status" in keywords:
        return _status_keyword_writes(call)
    if isinstance(func, ast.Attribute):
        return _fields_listed(func, call, keywords)
    if isinstance(func, ast.Name) and func.id == "setattr" and len(call.args) == 3:
        target, attribute, value = call.args
        if _is_constant(attribute, "status") and (_is_run(target) or _mentions_run_status(value)):
            return 'setattr(run, "status", ...)'
    return None


def _run_status_records(tree: ast.Module) -> set[str]:
    """Classes that annotate `status: RunStatus` (a record of how a run ends, say)."""
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any(
            isinstance(item, ast.AnnAssign)
            and name_of(item.target) == "status"
            and _mentions_run_status(item.annotation)
            for item in node.body
        )
    }


def _dict_value_is_run_status(value: ast.AST, in_record: bool) -> bool:
    if _mentions_run_status(value):
        return True
    return (
        in_record
        and isinstance(value, ast.Attribute)
        and value.attr == "status"
        and isinstance(value.value, ast.Name)
        and value.value.id == "self"
    )


class _Finder(WriteFinder):
    SQL = _SQL
    SQL_SAYS = "UPDATE chat_run SET status = ..."

    def __init__(self, records: set[str]) -> None:
        self.records = records
        self.classes: list[str] = []
        self.found: list[tuple[int, str]] = []

    @property
    def in_record(self) -> bool:
        return bool(self.classes) and self.classes[-1] in self.records

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes.append(node.name)
        self.generic_visit(node)
        self.classes.pop()

    def written(self, call: ast.Call) -> str | None:
        return _call_writes(call)

    def store(self, target: ast.AST, value: ast.AST | None, line: int) -> None:
        if isinstance(target, ast.Attribute) and target.attr == "status":
            if _is_run(target.value) or (value is not None and _mentions_run_status(value)):
                self.found.append((line, "run.status = ..."))
        elif isinstance(target, ast.Subscript):
            if (
                _is_constant(target.slice, "status")
                and value is not None
                and _dict_value_is_run_status(value, self.in_record)
            ):
                self.found.append((line, 'fields["status"] = RunStatus...'))
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self.store(element, None, line)

    def visit_Dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values, strict=True):
            if _is_constant(key, "status") and _dict_value_is_run_status(value, self.in_record):
                self.found.append((node.lineno, '{"status": RunStatus...}'))
        self.generic_visit(node)


def status_writes(source: str) -> list[tuple[int, str]]:
    """Each write of a run's status in `source`: its line and what it is."""
    tree = ast.parse(source)
    finder = _Finder(_run_status_records(tree))
    finder.visit(tree)
    return sorted(set(finder.found))


def test_only_the_ledger_writes_a_runs_status():
    assert offenders(LEDGER, status_writes) == []


def test_the_ledger_is_where_the_status_is_written():
    assert status_writes(LEDGER.read_text()), "the ledger writes no status: is it still the writer?"


@pytest.mark.parametrize(
    "source",
    [
        "run.status = RunStatus.RUNNING",
        "turn.run.status = x",
        "locked.status = RunStatus.CANCELLED",
        "anything.status = RunStatus.FAILED",
        "setattr(run, 'status', value)",
        "Run.objects.filter(pk=pk).update(status=RunStatus.RUNNING, lease=None)",
        "Run.objects.filter(pk=pk).exclude(x=1).update(status=value)",
        "type(run).objects.filter(pk=pk).update(status=value)",
        "Run.objects.create(conversation=c, status=RunStatus.QUEUED)",
        "Run(conversation=c, status=RunStatus.QUEUED)",
        "run_write(run, token, status=RunStatus.AWAITING_APPROVAL)",
        "rows_update(Run, where, status=value)",
        "run.save(update_fields=['status', 'lease'])",
        "Run.objects.bulk_update(runs, ['status'])",
        "fields['status'] = RunStatus.AWAITING_APPROVAL",
        "fields = {'status': RunStatus.COMPLETED, 'lease': None}",
        "class End:\n    status: RunStatus\n    def fields(self):\n"
        "        return {'status': self.status}",
        "SQL = 'UPDATE chat_run SET started_at = %s, status = %s WHERE id = %s'",
    ],
)
def test_a_write_of_a_runs_status_is_named(source):
    assert status_writes(source)


@pytest.mark.parametrize(
    "source",
    [
        "execution.status = ExecutionStatus.PENDING",
        "row.status = CallStatus.SUCCEEDED",
        "execution.save(update_fields=['status', 'started_at'])",
        "ToolExecution.objects.filter(pk=pk).update(status=ExecutionStatus.RUNNING)",
        "ModelCall.objects.create(run=run, status=CallStatus.SUCCEEDED)",
        "Run.objects.filter(pk=pk, status=RunStatus.RUNNING).update(heartbeat_at=now)",
        "Run.objects.filter(status__in=[RunStatus.QUEUED]).values_list('pk')",
        "run_write(run, token, lease=None, heartbeat_at=now)",
        "details = {'run_id': str(run.pk), 'status': run.status}",
        "body = {'status': 'completed'}",
        "SQL = 'SELECT status FROM chat_run WHERE status = %s'",
        "if run.status == RunStatus.RUNNING:\n    pass",
    ],
)
def test_a_read_or_another_models_status_is_not_named(source):
    assert status_writes(source) == []
