"""What bench/timeline/sitecustomize.py installs: timed wrappers, one log line per entry and exit."""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import threading
import time
from typing import Any

# The engine's steps (module, function), wrapped wherever they were imported.
STEPS = [
    ("chat.services.runs", "run_start"),
    ("chat.message_rate", "message_rate_check"),
    ("chat.engine.dispatch", "dispatch_run"),
    ("chat.engine.ledger", "run_claim"),
    ("chat.engine.request", "history_load"),
    ("chat.engine.request", "request_build"),
    ("chat.engine.model_step", "model_step"),
    ("chat.engine.model_calls", "model_call"),
    ("chat.engine.answer_store", "answer_store"),
    ("chat.engine.tool_calls", "tool_call_run"),
    ("tools.executor", "execute_tool"),
]

_lock = threading.Lock()
_log: Any = None


def mark(label: str) -> None:
    line = f"{time.time():.6f} {threading.get_ident()} {label}\n"
    with _lock:
        _log.write(line)


def _wrapped(function: Any, label: str) -> Any:
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            detail = _detail(args)
            mark(f"> {label}{detail}")
            try:
                return await function(*args, **kwargs)
            finally:
                mark(f"< {label}{detail}")

        return timed_async

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        mark(f"> {label}")
        try:
            return function(*args, **kwargs)
        finally:
            mark(f"< {label}")

    return timed


def _detail(args: tuple[Any, ...]) -> str:
    """The type of an event a consumer sends (its envelope is the first argument after self)."""
    if len(args) > 1 and isinstance(args[1], dict):
        return f" {args[1].get('type')}"
    return ""


def _replace_everywhere(original: Any, replacement: Any) -> None:
    for module in list(sys.modules.values()):
        names = getattr(module, "__dict__", None)
        if not names:
            continue
        for name, value in list(names.items()):
            if value is original:
                setattr(module, name, replacement)


def install(path: str) -> None:
    global _log
    _log = open(path, "a", buffering=1)  # noqa: SIM115 - for the process's life
    for module_name, name in STEPS:
        module = importlib.import_module(module_name)
        original = getattr(module, name)
        _replace_everywhere(original, _wrapped(original, f"{module_name.split('.')[-1]}.{name}"))

    from chat.live import consumers, events

    send = consumers.ConversationConsumer._send
    consumers.ConversationConsumer._send = _wrapped(send, "consumer._send")
    publish, layer_send = events.events_publish, events._send

    def events_publish(*args: Any, **kwargs: Any) -> Any:
        mark("publish " + ",".join(event.TYPE for event in kwargs.get("events", ())))
        return publish(*args, **kwargs)

    def sent(stored: Any, *args: Any, **kwargs: Any) -> Any:
        mark("> send " + ",".join(event.type for event in stored))
        try:
            return layer_send(stored, *args, **kwargs)
        finally:
            mark("< send")

    _replace_everywhere(publish, events_publish)
    _replace_everywhere(layer_send, sent)

    from django.db.backends import utils
    from django.db.backends.base import base

    execute = utils.CursorWrapper.execute

    def timed_execute(self: Any, sql: Any, params: Any = None) -> Any:
        mark("> SQL " + " ".join(str(sql).split())[:48])
        try:
            return execute(self, sql, params)
        finally:
            mark("< SQL")

    utils.CursorWrapper.execute = timed_execute
    base.BaseDatabaseWrapper.connect = _wrapped(base.BaseDatabaseWrapper.connect, "db connect")
    base.BaseDatabaseWrapper.commit = _wrapped(base.BaseDatabaseWrapper.commit, "db commit")
    from celery.signals import task_prerun

    def task_started(task: Any = None, **_: Any) -> None:
        mark(f"task {task.name} started")

    task_prerun.connect(task_started, weak=False)
    program = (
        "uvicorn" if "uvicorn" in sys.orig_argv else "celery" if "celery" in sys.orig_argv else ""
    )
    mark(f"probe installed {program}")
