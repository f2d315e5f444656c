"""A tool call's outcome has one writer: chat/engine/ledger/ (its `calls` module).

Every other module under chat/ (migrations aside) is read as source, and any
write of a ToolExecution's outcome in it is named. The outcome is what became
of the call after the model asked for it (`OUTCOME`): its status, its result
and what the model was sent, its error and timings, who ran it, the person's
decision and the arguments approved, the recorded call a replay served. The
call as the model asked it (name, arguments, step, the policy's verdict) is
the row's creation, and may be built where the answer is stored; a running
call's `heartbeat_at` is its liveness, renewed by its heartbeat. A write is:

- an attribute store `X.f = v` (or `setattr(X, "f", v)`) of an outcome field
  `f` on a call, by its name (`execution`, `…_execution`), or a `status`
  that is an `ExecutionStatus`;
- a call that writes ToolExecution rows with an outcome field (or with
  `**fields`, which may hold one): `ToolExecution(...)`, a query's `update` /
  `create` / `get_or_create` / `update_or_create` on a chain that starts at
  `ToolExecution` (or at a name bound to such a chain in the same function,
  or a parameter annotated as ToolExecution's queryset), `rows_update`;
- a call's `save` listing an outcome field (or saving every column, or
  fields it does not spell out), a ToolExecution `bulk_update` alike;
- SQL text that updates chat_toolexecution.

A read (`filter(status=...)`, `values(...)`) is not a write, and names nothing.
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
    mentions,
    name_of,
    offenders,
    writes_in,
)

LEDGER = ROOT / "chat" / "engine" / "ledger"

OUTCOME = frozenset(
    {
        "status",
        "result",
        "content",
        "result_chars",
        "truncated",
        "error",
        "started_at",
        "finished_at",
        "duration_ms",
        "attempts",
        "worker",
        "approved_by",
        "approved_by_id",
        "decided_at",
        "decision_reason",
        "approved_arguments",
        "standing_approval",
        "standing_approval_id",
        "replayed_from",
        "replayed_from_id",
    }
)

_CALL_NAME = re.compile(r"^(execution|.*_execution)$")
_MODEL = {"ToolExecution", "Execution"}
_SQL = re.compile(r"\bUPDATE\s+\"?chat_toolexecution\"?\s+SET\b", re.IGNORECASE)


def _is_call(node: ast.AST) -> bool:
    name = name_of(node)
    return name is not None and bool(_CALL_NAME.match(name))


def _through_related(node: ast.AST) -> bool:
    """Whether the chain goes through a run's or a message's calls: `run.tool_executions...`."""
    while True:
        if isinstance(node, ast.Attribute):
            if node.attr == "tool_executions":
                return True
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func
        else:
            return False


def _outcome_listed(node: ast.AST | None) -> bool:
    return isinstance(node, ast.List | ast.Tuple | ast.Set) and any(
        isinstance(e, ast.Constant) and e.value in OUTCOME for e in node.elts
    )


def _unknown_or_outcome(node: ast.AST | None) -> bool:
    """A list of fields that holds an outcome field, or one the source does not spell out."""
    return not isinstance(node, ast.List | ast.Tuple | ast.Set) or _outcome_listed(node)


def _outcome_keywords(call: ast.Call) -> bool:
    return any(k.arg is None or k.arg in OUTCOME for k in call.keywords)


class _Finder(WriteFinder):
    SQL = _SQL
    SQL_SAYS = "UPDATE chat_toolexecution SET ..."

    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []
        self.scopes: list[set[str]] = [set()]

    def _of_model(self, node: ast.AST) -> bool:
        root = chain_root(node)
        return _through_related(node) or (
            isinstance(root, ast.Name)
            and (root.id in _MODEL or any(root.id in scope for scope in self.scopes))
        )

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        scope: set[str] = set()
        for arg in [*node.args.args, *node.args.kwonlyargs]:
            if mentions(arg.annotation, "QuerySet") and mentions(arg.annotation, "ToolExecution"):
                scope.add(arg.arg)
        # Names bound to a ToolExecution query anywhere in the function (to a fixpoint).
        grew = True
        while grew:
            grew = False
            for sub in ast.walk(node):
                if isinstance(sub, ast.Assign) and self._binds_query(sub.value, scope):
                    for target in sub.targets:
                        if isinstance(target, ast.Name) and target.id not in scope:
                            scope.add(target.id)
                            grew = True
        self.scopes.append(scope)
        self.generic_visit(node)
        self.scopes.pop()

    def _binds_query(self, value: ast.AST, scope: set[str]) -> bool:
        if not isinstance(value, ast.Call | ast.Attribute):
            return False
        root = chain_root(value)
        return isinstance(root, ast.Name) and (root.id in _MODEL or root.id in scope)

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def store(self, target: ast.AST, value: ast.AST | None, line: int) -> None:
        if isinstance(target, ast.Attribute) and target.attr in OUTCOME:
            of_call = _is_call(target.value)
            if of_call or (target.attr == "status" and mentions(value, "ExecutionStatus")):
                self.found.append((line, f"execution.{target.attr} = ..."))
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self.store(element, None, line)

    def written(self, call: ast.Call) -> str | None:
        func = call.func
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        if isinstance(func, ast.Name):
            if func.id in _MODEL and _outcome_keywords(call):
                return "ToolExecution(<outcome>=...)"
            if func.id == "setattr" and len(call.args) == 3 and _is_call(call.args[0]):
                field = call.args[1]
                if not isinstance(field, ast.Constant) or field.value in OUTCOME:
                    return "setattr(execution, <outcome>, ...)"
            if (
                func.id == "rows_update"
                and call.args
                and name_of(call.args[0]) in _MODEL
                and _outcome_keywords(call)
            ):
                return "rows_update(ToolExecution, <outcome>=...)"
            return None
        if not isinstance(func, ast.Attribute):
            return None
        if func.attr in WRITES and self._of_model(func.value) and _outcome_keywords(call):
            return f"ToolExecution ... .{func.attr}(<outcome>=...)"
        if func.attr == "bulk_update" and self._of_model(func.value):
            listed = keywords.get("fields") or (call.args[1] if len(call.args) > 1 else None)
            if _unknown_or_outcome(listed):
                return "ToolExecution ... .bulk_update([...], [<outcome>])"
        if func.attr == "save" and _is_call(func.value):
            fields = keywords.get("update_fields")
            if fields is None or _unknown_or_outcome(fields):
                return "execution.save(update_fields=[<outcome>, ...])"
        return None


def outcome_writes(source: str) -> list[tuple[int, str]]:
    """Each write of a tool call's outcome in `source`: its line and what it is."""
    return writes_in(_Finder, source)


def test_only_the_ledger_writes_a_calls_outcome():
    assert offenders(LEDGER, outcome_writes) == []


def test_the_ledger_is_where_the_outcome_is_written():
    written = [w for path in LEDGER.rglob("*.py") for w in outcome_writes(path.read_text())]
    assert written, "the ledger writes no call's outcome: is it still the writer?"


@pytest.mark.parametrize(
    "source",
    [
        "execution.status = ExecutionStatus.RUNNING",
        "execution.status = result.status",
        "call.status = ExecutionStatus.CLIENT",
        "execution.decision_reason = verdict.reason()",
        "execution.approved_by, execution.decided_at = user, now",
        "execution.attempts += 1",
        "execution.started_at = execution.heartbeat_at = now",
        "turn.execution.finished_at = now",
        "setattr(execution, 'error', text)",
        "setattr(execution, name, value)",
        "ToolExecution.objects.filter(pk=pk).update(status=ExecutionStatus.REJECTED)",
        "ToolExecution.objects.filter(pk=pk).update(replayed_from=candidate)",
        "ToolExecution.objects.filter(pk=pk).update(**fields)",
        "def f(pk):\n    rows = ToolExecution.objects.filter(pk=pk)\n"
        "    if x:\n        rows = rows.exclude(status__in=DONE)\n"
        "    return rows.update(finished_at=now, **fields)",
        "def f(executions: QuerySet[ToolExecution]):\n    executions.update(error='x')",
        "ToolExecution.objects.create(run=run, status=ExecutionStatus.CLIENT)",
        "ToolExecution(run=run, tool_call_id=i, status=ExecutionStatus.AWAITING_APPROVAL)",
        "ToolExecution.objects.bulk_update(rows, ['status', 'error'])",
        "ToolExecution.objects.bulk_update(rows, fields=['result'])",
        "rows_update(ToolExecution, where, status=value)",
        "execution.save(update_fields=['status', 'started_at'])",
        "execution.save()",
        "execution.save(update_fields=fields)",
        "SQL = 'UPDATE chat_toolexecution SET status = %s WHERE id = %s'",
        "run.tool_executions.update(status=ExecutionStatus.CANCELLED)",
        "message.tool_executions.filter(finished_at=None).update(error='x')",
    ],
)
def test_a_write_of_a_calls_outcome_is_named(source):
    assert outcome_writes(source)


@pytest.mark.parametrize(
    "source",
    [
        "run.status = RunStatus.RUNNING",
        "model_call.status = CallStatus.SUCCEEDED",
        "result.duration_ms = 12",
        "execution.policy_decision, execution.policy_rule = verdict.decision, verdict.rule",
        "execution.message = message",
        "ToolExecution(run=run, message=m, tool_call_id=i, name=n, arguments=a)",
        "ToolExecution.objects.bulk_create(executions)",
        "ToolExecution.objects.filter(status=ExecutionStatus.CLIENT).values_list('pk')",
        "ToolExecution.objects.filter(pk=pk, status=ExecutionStatus.RUNNING).exists()",
        "def f(pk):\n    rows = ToolExecution.objects.filter(pk=pk)\n"
        "    rows.update(heartbeat_at=now)",
        "def f(pk):\n    rows = Run.objects.filter(pk=pk)\n    rows.update(status=x)",
        "Run.objects.filter(pk=pk).update(error='x')",
        "Message.objects.filter(pk=pk).update(content=text)",
        "message.save(update_fields=['content'])",
        "StandingApproval.objects.create(tool=n, created_from=execution)",
        "SQL = 'SELECT status FROM chat_toolexecution WHERE id = %s'",
        "if execution.status == ExecutionStatus.RUNNING:\n    pass",
        "run.tool_executions.filter(status=ExecutionStatus.RUNNING).count()",
        "run.tool_executions.update(heartbeat_at=now)",
    ],
)
def test_a_read_or_another_rows_write_is_not_named(source):
    assert outcome_writes(source) == []
