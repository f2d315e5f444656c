"""A model call's audit row has one writer: chat/engine/ledger/ (its `model_calls` module).

Every other module under chat/ (migrations aside) is read as source, and any
creation or update of a ModelCall in it is named. A row is built unsaved when
its call starts and stored once, when the call ended, so building one counts
as much as storing it: every column of ModelCall (`FIELDS`, read off the
model) is the ledger's. A model call is, by its name, `model_call` or
`…_model_call`, a `Called`'s `….row`, or in a function a parameter or name
annotated ModelCall, or a name bound to `ModelCall(...)`, to `….row` or to a
builder of the row (`…call_row(...)`, as the ledger's `model_call_row`). A write is:

- a ModelCall built: `ModelCall(...)`;
- an attribute store `X.f = v` (or `setattr(X, "f", v)`) of a column `f` on a
  model call, or of a `status` that is a `CallStatus`;
- a model call's `save`, or its `row_insert`;
- a query that writes rows: `update` / `create` / `get_or_create` /
  `update_or_create` / `bulk_create` / `bulk_update` on a chain that starts at
  `ModelCall` or goes through a run's `model_call_rows`, or
  `rows_update(ModelCall, ...)`;
- SQL text that inserts into or updates chat_modelcall.

A read (`filter(...)`, `exists()`, a column read, `SELECT ... FROM
chat_modelcall`) is not a write, and a run's own counter of its calls
(`Run.model_calls`) is the run's row, not a ModelCall's.
"""

from __future__ import annotations

import ast
import re

import pytest

from chat.models import ModelCall
from tests.chat.engine.writers import (
    ROOT,
    WRITES,
    WriteFinder,
    chain_root,
    mentions,
    name_of,
    named_row_write,
    offenders,
    writes_in,
)

LEDGER = ROOT / "chat" / "engine" / "ledger"

FIELDS = frozenset(
    name for field in ModelCall._meta.concrete_fields for name in (field.name, field.attname)
)

_CALL_NAME = re.compile(r"^(model_call|.*_model_call)$")
_QUERY_WRITES = WRITES | {"bulk_create", "bulk_update"}
_BUILDER = re.compile(r"^(ModelCall|.*call_row)$")
_SQL = re.compile(r"\b(INSERT\s+INTO|UPDATE)\s+\"?chat_modelcall\"?\b", re.IGNORECASE)


def _through_rows(node: ast.AST) -> bool:
    """Whether the chain goes through a run's model calls: `run.model_call_rows...`."""
    while True:
        if isinstance(node, ast.Attribute):
            if node.attr == "model_call_rows":
                return True
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func
        else:
            return False


def _of_model(node: ast.AST) -> bool:
    root = chain_root(node)
    return _through_rows(node) or (isinstance(root, ast.Name) and root.id == "ModelCall")


def _binds_call(value: ast.AST | None) -> bool:
    """Whether `value` is a model call: one built, or a `Called`'s row."""
    if isinstance(value, ast.Attribute):
        return value.attr == "row"
    if not isinstance(value, ast.Call):
        return False
    name = name_of(value.func)
    return name is not None and bool(_BUILDER.match(name))


class _Finder(WriteFinder):
    SQL = _SQL
    SQL_SAYS = "INSERT INTO / UPDATE chat_modelcall ..."

    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []
        self.scopes: list[set[str]] = [set()]

    def _is_call(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute) and node.attr == "row":
            return True
        name = name_of(node)
        if name is None:
            return False
        if _CALL_NAME.match(name):
            return True
        return isinstance(node, ast.Name) and any(name in scope for scope in self.scopes)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        scope = {
            arg.arg
            for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            if mentions(arg.annotation, "ModelCall")
        }
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign) and _binds_call(sub.value):
                scope |= {t.id for t in sub.targets if isinstance(t, ast.Name)}
            elif (
                isinstance(sub, ast.AnnAssign)
                and isinstance(sub.target, ast.Name)
                and (mentions(sub.annotation, "ModelCall") or _binds_call(sub.value))
            ):
                scope.add(sub.target.id)
        self.scopes.append(scope)
        self.generic_visit(node)
        self.scopes.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def store(self, target: ast.AST, value: ast.AST | None, line: int) -> None:
        if isinstance(target, ast.Attribute) and target.attr in FIELDS:
            if self._is_call(target.value) or (
                target.attr == "status" and mentions(value, "CallStatus")
            ):
                self.found.append((line, f"model_call.{target.attr} = ..."))
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self.store(element, None, line)

    def _named_written(self, call: ast.Call, name: str) -> str | None:
        return named_row_write(
            call, name, model="ModelCall", label="model_call", is_row=self._is_call, fields=FIELDS
        )

    def written(self, call: ast.Call) -> str | None:
        func = call.func
        if isinstance(func, ast.Name):
            return self._named_written(call, func.id)
        if not isinstance(func, ast.Attribute):
            return None
        if func.attr in _QUERY_WRITES and _of_model(func.value):
            return f"ModelCall ... .{func.attr}(...)"
        if func.attr == "save" and self._is_call(func.value):
            return "model_call.save(...)"
        return None


def model_call_writes(source: str) -> list[tuple[int, str]]:
    """Each creation or update of a ModelCall in `source`: its line and what it is."""
    return writes_in(_Finder, source)


def test_only_the_ledger_writes_model_calls():
    assert offenders(LEDGER, model_call_writes) == []


def test_the_ledger_is_where_model_calls_are_written():
    written = [w for path in LEDGER.rglob("*.py") for w in model_call_writes(path.read_text())]
    assert written, "the ledger writes no ModelCall: is it still the writer?"


@pytest.mark.parametrize(
    "source",
    [
        "ModelCall(id=i, run=run, step=1, purpose=p, model=m, provider=n, started_at=now)",
        "model_call.status = CallStatus.FAILED",
        "row.status = CallStatus.SUCCEEDED",
        "model_call.response_message = message",
        "suggested.model_call.error = 'x'",
        "called.row.forced_answer = answer",
        "def f(row: ModelCall):\n    row.prompt_tokens = 3",
        "def f(row: ModelCall | None):\n    row.cost_usd, row.note = cost, ''",
        "def f(called):\n    row = called.row\n    row.error = 'unreadable'",
        "def f(run):\n    row = model_call_row(run, call_id=i)\n    row.request_hash = h",
        "def f(run):\n    row = call_row(run, call_id=i)\n    row.message_count = 2",
        "def f(run):\n    row = ModelCall(run=run)\n    row.attempts += 1",
        "def f(run):\n    row: ModelCall = g(run)\n    row.logprobs = None",
        "setattr(model_call, 'latency_ms', 12)",
        "setattr(model_call, name, value)",
        "model_call.save(force_insert=True)",
        "called.row.save(force_insert=True)",
        "def f(row: ModelCall):\n    row.save(update_fields=['status'])",
        "row_insert(model_call)",
        "def f(row: ModelCall):\n    row_insert(row)",
        "ModelCall.objects.bulk_create([suggested.model_call])",
        "ModelCall.objects.create(run=run, step=1)",
        "ModelCall.objects.filter(pk=pk).update(status=CallStatus.FAILED)",
        "ModelCall.objects.filter(run=run).update(response_message=None)",
        "ModelCall.objects.bulk_update(rows, ['error'])",
        "ModelCall.objects.get_or_create(id=i, defaults={})",
        "run.model_call_rows.filter(purpose='tools').update(tools_offered=[])",
        "rows_update(ModelCall, where, error='x')",
        "SQL = 'INSERT INTO chat_modelcall (id, run_id) VALUES (%s, %s)'",
        "SQL = 'UPDATE chat_modelcall SET status = %s WHERE id = %s'",
    ],
)
def test_a_write_of_a_model_call_is_named(source):
    assert model_call_writes(source)


@pytest.mark.parametrize(
    "source",
    [
        "ModelCall.objects.filter(run=run).values_list('step', 'purpose')",
        "ModelCall.objects.filter(pk=message_id).exists()",
        "ModelCall.objects.filter(run=run).aggregate(cost=Sum('cost_usd'))",
        "run.model_call_rows.all()",
        "cost = model_call.cost_usd",
        "if row.status == CallStatus.FAILED:\n    pass",
        "tokens = (model_call.prompt_tokens or 0) + (model_call.completion_tokens or 0)",
        "Run.objects.filter(pk=run.pk).update(model_calls=F('model_calls') + 1)",
        "run.model_calls += 1",
        "run_write(run, token, model_calls=run.model_calls + 1)",
        "execution.status = ExecutionStatus.RUNNING",
        "execution.save(update_fields=['status'])",
        "row.content = text",
        "message.save(update_fields=['content'])",
        "ToolExecution.objects.bulk_create(executions)",
        "Message.objects.filter(pk=pk).update(suggestions=s)",
        "def f(row: ModelCall):\n    span.set_attribute('id', str(row.pk))",
        "model_call_failed(model_call, 'stopped')",
        "SQL = 'SELECT SUM(mc.cost_usd) FROM chat_modelcall AS mc'",
    ],
)
def test_a_read_or_another_rows_write_is_not_named(source):
    assert model_call_writes(source) == []
