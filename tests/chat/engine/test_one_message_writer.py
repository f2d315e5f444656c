"""A turn's messages have one writer: chat/engine/ledger/ (its `messages` module).

A turn's messages are the assistant and tool messages a run stores, and
their later updates (an approver's arguments in the assistant message's
calls, a final answer's follow-ups, a late result in its tool message). Not
a turn's, and exempt by module (`EXEMPT`, each with what it writes and why):
the user's own message a post stores, a /v1 client's own history and the
API's edits and regenerates, which supersede messages (chat/services/runs.py);
a replay's copy of a conversation (chat/services/replays.py).

Every other module under chat/ (migrations aside) is read as source, and any
write of a Message in it is named. A message is, by its name, `message` or
`…_message`, or in a function a parameter or name annotated Message, or a
name bound to `Message(...)` or to a builder of one (`…message_build(...)`).
A write is:

- a Message built: `Message(...)`;
- an attribute store `X.f = v` (or `setattr(X, "f", v)`) of a column `f` of
  Message on a message;
- a message's `save`, or its `row_insert`;
- a query that writes rows: `update` / `create` / `get_or_create` /
  `update_or_create` / `bulk_create` / `bulk_update` on a chain that starts at
  `Message` or at `current_messages(...)`, goes through a `messages` relation
  (`conversation.messages.create(...)`), or starts at a name bound to such a
  chain in the same function; `rows_update(Message, ...)`;
- SQL text that inserts into or updates chat_message.

A read (`filter(...)`, `values_list(...)`, a column read, `SELECT ... FROM
chat_message`) is not a write, and a client's message in a request
(`ClientMessage(...)`) is not a row.
"""

from __future__ import annotations

import ast
import re

import pytest

from chat.models import Message
from tests.chat.engine.writers import (
    ROOT,
    WRITES,
    WriteFinder,
    chain_root,
    mentions,
    name_of,
    named_row_write,
    sources_outside,
    writes_in,
)

LEDGER = ROOT / "chat" / "engine" / "ledger"

# The modules that write Messages which are not a turn's: each, what it writes and why.
EXEMPT = {
    # The user's own message a post stores and the messages an edit or a
    # regenerate supersedes: what the person sent, before a run speaks.
    ROOT / "chat" / "services" / "runs.py",
    # A /v1 client's own history and new message (`_imported`, `client_run_start`,
    # with bulk_create): what the client sent, before a run speaks.
    ROOT / "chat" / "services" / "client_turns.py",
    # A replay's copy of the conversation it replays: the original's
    # messages, copied before its run starts.
    ROOT / "chat" / "services" / "replays.py",
}

FIELDS = frozenset(
    name for field in Message._meta.concrete_fields for name in (field.name, field.attname)
)

_MESSAGE_NAME = re.compile(r"^(message|.*_message)$")
_QUERY_WRITES = WRITES | {"bulk_create", "bulk_update"}
_BUILDER = re.compile(r"^(Message|.*message_build)$")
_QUERYSETS = frozenset({"Message", "current_messages"})
_SQL = re.compile(r"\b(INSERT\s+INTO|UPDATE)\s+\"?chat_message\"?(?!\w)", re.IGNORECASE)


def _through_messages(node: ast.AST) -> bool:
    """Whether the chain goes through a `messages` relation: `conversation.messages...`."""
    while True:
        if isinstance(node, ast.Attribute):
            if node.attr == "messages":
                return True
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func
        else:
            return False


def _of_model(node: ast.AST, rows: set[str]) -> bool:
    """Whether `node` is a query of Message rows."""
    root = chain_root(node)
    if isinstance(root, ast.Call):
        root = root.func
    return _through_messages(node) or (
        isinstance(root, ast.Name) and (root.id in _QUERYSETS or root.id in rows)
    )


def _binds_message(value: ast.AST | None) -> bool:
    """Whether `value` is a message built: `Message(...)`, `tool_message_build(...)`."""
    if not isinstance(value, ast.Call):
        return False
    name = name_of(value.func)
    return name is not None and bool(_BUILDER.match(name))


class _Finder(WriteFinder):
    SQL = _SQL
    SQL_SAYS = "INSERT INTO / UPDATE chat_message ..."

    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []
        self.scopes: list[set[str]] = [set()]
        self.rows: list[set[str]] = [set()]

    def _is_message(self, node: ast.AST) -> bool:
        name = name_of(node)
        if name is None:
            return False
        if _MESSAGE_NAME.match(name):
            return True
        return isinstance(node, ast.Name) and any(name in scope for scope in self.scopes)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        scope = {
            arg.arg
            for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            if mentions(arg.annotation, "Message")
        }
        rows: set[str] = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign):
                names = {t.id for t in sub.targets if isinstance(t, ast.Name)}
                if _binds_message(sub.value):
                    scope |= names
                elif _of_model(sub.value, rows):
                    rows |= names
            elif (
                isinstance(sub, ast.AnnAssign)
                and isinstance(sub.target, ast.Name)
                and (mentions(sub.annotation, "Message") or _binds_message(sub.value))
            ):
                scope.add(sub.target.id)
        self.scopes.append(scope)
        self.rows.append(rows)
        self.generic_visit(node)
        self.scopes.pop()
        self.rows.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def store(self, target: ast.AST, value: ast.AST | None, line: int) -> None:
        if isinstance(target, ast.Attribute) and target.attr in FIELDS:
            if self._is_message(target.value):
                self.found.append((line, f"message.{target.attr} = ..."))
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self.store(element, None, line)

    def _named_written(self, call: ast.Call, name: str) -> str | None:
        return named_row_write(
            call, name, model="Message", label="message", is_row=self._is_message, fields=FIELDS
        )

    def written(self, call: ast.Call) -> str | None:
        func = call.func
        if isinstance(func, ast.Name):
            return self._named_written(call, func.id)
        if not isinstance(func, ast.Attribute):
            return None
        rows = set().union(*self.rows)
        if func.attr in _QUERY_WRITES and _of_model(func.value, rows):
            return f"Message ... .{func.attr}(...)"
        if func.attr == "save" and self._is_message(func.value):
            return "message.save(...)"
        return None


def message_writes(source: str) -> list[tuple[int, str]]:
    """Each creation or update of a Message in `source`: its line and what it is."""
    return writes_in(_Finder, source)


def test_only_the_ledger_writes_a_turns_messages():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in sources_outside(LEDGER)
        if path not in EXEMPT
        for line, what in message_writes(path.read_text())
    ]
    assert found == []


def test_the_ledger_is_where_a_turns_messages_are_written():
    written = [w for path in LEDGER.rglob("*.py") for w in message_writes(path.read_text())]
    assert written, "the ledger writes no Message: is it still the writer?"


def test_each_exempt_module_still_writes_messages():
    # An exemption that no longer writes anything is one to take off the list.
    assert [path for path in sorted(EXEMPT) if not message_writes(path.read_text())] == []


@pytest.mark.parametrize(
    "source",
    [
        "Message(conversation_id=c, run=run, position=p, role=Role.ASSISTANT)",
        "row_insert(message)",
        "def f(run):\n    row = Message(run=run)\n    row_insert(row)",
        "def f(run):\n    row = tool_message_build(run_id=run.pk)\n    row.save()",
        "def f(answer: Message):\n    answer.content = 'x'",
        "message.tool_calls = calls",
        "final_message.suggestions = found",
        "setattr(message, 'resource_id', rid)",
        "setattr(message, field, value)",
        "message.save(update_fields=['content'])",
        "Message.objects.create(run=run, role=Role.TOOL)",
        "Message.objects.bulk_create(rows)",
        "Message.objects.bulk_update(rows, ['content'])",
        "Message.objects.filter(pk=final.pk).update(suggestions=s)",
        "Message.objects.filter(pk=pk).update(tool_calls=calls)",
        "Message.objects.get_or_create(id=i, defaults={})",
        "conversation.messages.create(role=Role.ASSISTANT, content='x')",
        "run.messages.filter(role=Role.TOOL).update(content='x')",
        "current_messages(c).filter(position__gte=p).update(superseded_at=now)",
        "def f(c):\n    rows = current_messages(c).filter(position__gte=1)\n    rows.update(x=1)",
        "def f(run):\n    rows = Message.objects.filter(run=run)\n    rows.update(content='')",
        "rows_update(Message, where, content='x')",
        "SQL = 'INSERT INTO chat_message (id, run_id) VALUES (%s, %s)'",
        "SQL = 'UPDATE chat_message SET content = %s WHERE id = %s'",
    ],
)
def test_a_write_of_a_message_is_named(source):
    assert message_writes(source)


@pytest.mark.parametrize(
    "source",
    [
        "Message.objects.filter(run=run, role=Role.ASSISTANT).first()",
        "Message.objects.filter(pk=pk).exists()",
        "current_messages(c).filter(role=Role.USER).order_by('-position').first()",
        "run.messages.all()",
        "content = message.content",
        "if message.role == Role.TOOL:\n    pass",
        "ClientMessage('user', content)",
        "message_to_api(message)",
        "execution.status = ExecutionStatus.RUNNING",
        "conversation.save(update_fields=['client_ref'])",
        "ModelCall.objects.filter(run=run).update(response_message=None)",
        "model_call.response_message = message",
        "Run.objects.filter(pk=run.pk).update(model_calls=1)",
        "ToolExecution.objects.filter(message=message).update(status=s)",
        "message_suggestions_write(final, found)",
        "SQL = 'SELECT position FROM chat_message WHERE conversation_id = %s'",
        "SQL = 'UPDATE chat_messagething SET x = 1'",
    ],
)
def test_a_read_or_another_rows_write_is_not_named(source):
    assert message_writes(source) == []
