"""The executor: every failure is a readable result with the right status, never an exception."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import re
import threading
import time
from decimal import Decimal

import pytest
from django.db import connections
from hypothesis import given
from hypothesis import strategies as st

from chat.models import ExecutionStatus, ToolExecution
from tools.context import ToolContext
from tools.executor import (
    ToolResult,
    ToolStatus,
    cancelled_result,
    execute_tool,
    interrupted_result,
    rejected_result,
    truncate_content,
)
from tools.registry import ToolRegistry


def run(reg, name, arguments, context) -> ToolResult:
    return execute_tool(name=name, arguments=arguments, context=context, registry=reg)


def payload(result: ToolResult) -> dict:
    """The content as the model reads it."""
    return json.loads(result.content)


@pytest.fixture
def reg() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool
    def add(ctx: ToolContext, a: int, b: int = 1) -> dict:
        """Add two integers."""
        return {"success": True, "result": a + b, "message": f"{a} + {b} = {a + b}"}

    @reg.tool
    def echo(ctx: ToolContext, text: str) -> str:
        """Return the text as is."""
        return text

    @reg.tool
    def nothing(ctx: ToolContext) -> dict:
        """Take no parameters."""
        return {"success": True}

    @reg.tool
    def explode(ctx: ToolContext, message: str = "boom") -> dict:
        """Raise."""
        raise ValueError(message)

    @reg.tool(sensitive=["api_key"])
    def login(ctx: ToolContext, user: str, api_key: str) -> dict:
        """Log in with a key."""
        return {"success": True, "message": f"Logged in as {user}"}

    @reg.tool(return_direct=True)
    def direct(ctx: ToolContext, ok: bool = True) -> dict:
        """Answer the user directly."""
        if not ok:
            return {"success": False, "error": "It did not work.", "message": "Sorry."}
        return {"success": True, "message": "Done, the light is on."}

    return reg


# --- Success ---------------------------------------------------------------------------


def test_a_dict_result_is_sent_as_json(reg, make_context):
    result = run(reg, "add", '{"a": 2, "b": 3}', make_context())
    assert result.status == ToolStatus.SUCCEEDED == "succeeded"
    assert result.status == "succeeded"
    assert payload(result) == {"success": True, "result": 5, "message": "2 + 3 = 5"}
    assert result.result == {"success": True, "result": 5, "message": "2 + 3 = 5"}
    assert result.result["message"] == "2 + 3 = 5"
    assert result.audit_arguments == {"a": 2, "b": 3}
    assert result.result_chars == len(result.content)
    assert not result.truncated
    assert result.error == result.error_type == result.traceback == ""


def test_a_str_result_is_the_content_itself(reg, make_context):
    result = run(reg, "echo", '{"text": "héllo \\"world\\""}', make_context())
    assert result.content == 'héllo "world"'
    assert result.result == 'héllo "world"'


@pytest.mark.parametrize("arguments", ["", "  ", "{}"])
def test_empty_arguments_mean_no_parameters(reg, make_context, arguments):
    assert run(reg, "nothing", arguments, make_context()).status == "succeeded"


def test_lax_types_are_coerced_like_pydantic_does(reg, make_context):
    assert run(reg, "add", '{"a": "2"}', make_context()).result["result"] == 3


def test_common_python_values_are_made_json(make_context):
    reg = ToolRegistry()

    @reg.tool
    def rich(ctx: ToolContext) -> dict:
        """Return values json.dumps alone would refuse."""
        return {
            "when": datetime.date(2025, 6, 3),
            "amount": Decimal("1.50"),
            "tags": {"a"},
        }

    result = run(reg, "rich", "{}", make_context())
    assert result.status == "succeeded"
    assert result.result == {"when": "2025-06-03", "amount": "1.50", "tags": ["a"]}


def test_return_direct_only_on_success(reg, make_context):
    assert run(reg, "direct", "{}", make_context()).return_direct
    failed = run(reg, "direct", '{"ok": false}', make_context())
    assert not failed.return_direct
    assert failed.result["message"] == "Sorry."


# --- Failures ----------------------------------------------------------------------------


def assert_readable_failure(result: ToolResult, status: str, *words: str) -> dict:
    assert result.status == status
    assert result.status != "succeeded"
    body = payload(result)
    assert body["success"] is False
    assert isinstance(body["error"], str)
    assert body["error"]
    assert "details" in body
    for word in words:
        assert word in body["error"], (word, body["error"])
    assert "Traceback" not in result.content
    assert result.error == body["error"]
    return body


def test_unknown_tool_lists_the_known_ones(reg, make_context):
    result = run(reg, "subtract", '{"a": 1}', make_context())
    body = assert_readable_failure(result, "failed", "subtract", "add")
    assert body["details"]["known_tools"] == reg.names()
    assert result.error_type == "unknown_tool"
    assert result.audit_arguments == {"a": 1}
    assert result.result is None


@pytest.mark.parametrize("arguments", ['{"a": 1', "a=1", "{'a': 1}", "nul"])
def test_arguments_that_are_not_json(reg, make_context, arguments):
    result = run(reg, "add", arguments, make_context())
    body = assert_readable_failure(result, "failed", "not valid JSON")
    assert result.error_type == "invalid_json"
    assert result.arguments_raw == arguments
    assert result.audit_arguments is None
    assert "position" in body["details"]


@pytest.mark.parametrize(
    ("arguments", "got"), [("[1, 2]", "an array"), ('"a"', "a string"), ("3", "a number")]
)
def test_arguments_that_are_not_an_object(reg, make_context, arguments, got):
    result = run(reg, "add", arguments, make_context())
    body = assert_readable_failure(result, "failed", "JSON object", got)
    assert body["details"]["parameters"] == ["a", "b"]
    assert result.arguments_raw == arguments
    assert result.error_type == "invalid_arguments"


def test_validation_errors_name_each_field(reg, make_context):
    result = run(reg, "add", '{"b": "x", "c": 1}', make_context())
    body = assert_readable_failure(result, "failed", "Invalid arguments for add")
    assert body["details"]["errors"] == [
        {"field": "a", "message": "Field required"},
        {
            "field": "b",
            "message": "Input should be a valid integer, unable to parse string as an integer",
        },
        {"field": "c", "message": "Extra inputs are not permitted"},
    ]
    assert result.error_type == "validation_error"
    assert result.audit_arguments == {"b": "x", "c": 1}


def test_an_exception_in_the_tool_gives_its_type_and_message(reg, make_context, caplog):
    caplog.set_level(logging.WARNING, logger="tools.executor")
    result = run(reg, "explode", '{"message": "the fuse blew"}', make_context())
    body = assert_readable_failure(result, "failed", "ValueError: the fuse blew")
    assert body["details"] == {"exception": "ValueError", "message": "the fuse blew"}
    assert result.error_type == "tool_error"
    assert "Traceback" in result.traceback
    assert "def explode" in result.traceback or "raise ValueError" in result.traceback
    assert "raise ValueError" in caplog.text  # the traceback is in the log
    assert result.traceback in result.execution_fields()["error"]


def test_a_result_that_is_not_json_fails_readably(make_context):
    reg = ToolRegistry()

    @reg.tool
    def opaque(ctx: ToolContext) -> object:
        """Return something JSON cannot hold."""
        return {"thing": object()}

    @reg.tool
    def nan(ctx: ToolContext) -> float:
        """Return NaN."""
        return float("nan")

    for name in ("opaque", "nan"):
        result = run(reg, name, "{}", make_context())
        assert_readable_failure(result, "failed", "cannot be sent as JSON")
        assert result.error_type == "unserializable_result"


def test_a_tool_reporting_success_false_is_failed_with_its_own_content(reg, make_context):
    result = run(reg, "direct", '{"ok": false}', make_context())
    assert result.status == "failed"
    assert result.error == "It did not work."
    assert result.error_type == "tool_reported"
    assert payload(result) == {"success": False, "error": "It did not work.", "message": "Sorry."}


def test_the_executor_never_raises_even_on_its_own_bugs(reg, make_context, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("executor bug")

    monkeypatch.setattr("tools.executor._prepare", broken)
    result = run(reg, "add", '{"a": 1}', make_context())
    assert_readable_failure(result, "failed", "executor bug")


# --- Timeouts ----------------------------------------------------------------------------------


def test_a_hanging_sync_tool_times_out_within_a_second_of_its_timeout(
    make_context, release, events
):
    reg = ToolRegistry()

    finished = threading.Event()

    @reg.tool(timeout=1)
    def hang(ctx: ToolContext) -> dict:
        """Hang until released."""
        try:
            ctx.emit_progress(10, "started")
            release.wait(30)
            ctx.emit_progress(90, "too late")
            return {"success": True}
        finally:
            finished.set()

    started = time.monotonic()
    result = run(reg, "hang", "{}", make_context())
    elapsed = time.monotonic() - started

    # At its timeout, not when the tool ends (30 s); the upper bound leaves room
    # for a loaded machine.
    assert 1.0 <= elapsed < 10.0, elapsed
    body = assert_readable_failure(result, "timed_out", "hang", "1 s")
    assert body["details"] == {"timeout_s": 1.0}
    assert result.error_type == "timeout"
    assert 1000 <= result.duration_ms < 10_000
    assert not finished.is_set()
    # Events before the deadline arrive; the ones after it never do.
    release.set()
    assert finished.wait(10), "the abandoned tool never ran to its end"
    assert [e["message"] for e in events.of_type("tool.progress")] == ["started"]


def test_an_async_tool_is_cancelled_at_its_timeout(make_context):
    reg = ToolRegistry()
    seen: dict[str, bool] = {}

    @reg.tool(timeout=0.3)
    async def sleepy(ctx: ToolContext) -> dict:
        """Sleep too long."""
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen["cancelled"] = True
            raise
        return {"success": True}

    result = run(reg, "sleepy", "{}", make_context())
    assert result.status == "timed_out"
    # Cancelled, so stopped at its timeout rather than run on to its end (30 s).
    assert seen == {"cancelled": True}
    assert 300 <= result.duration_ms < 10_000


def test_a_timeout_error_raised_by_the_tool_is_its_failure_not_a_timeout(make_context):
    reg = ToolRegistry()

    @reg.tool
    async def upstream(ctx: ToolContext) -> dict:
        """Fail like an HTTP client that gave up."""
        raise TimeoutError("upstream did not answer")

    result = run(reg, "upstream", "{}", make_context())
    assert result.status == "failed"
    assert "TimeoutError: upstream did not answer" in result.error


def test_an_async_tool_blocking_its_loop_still_times_out(make_context, release):
    reg = ToolRegistry()

    finished = threading.Event()

    @reg.tool(timeout=0.3)
    async def blocks(ctx: ToolContext) -> dict:
        """Block the event loop (a bug, but the executor survives it)."""
        try:
            release.wait(30)
            return {"success": True}
        finally:
            finished.set()

    result = run(reg, "blocks", "{}", make_context())
    assert result.status == "timed_out"
    # The caller has its answer while the tool still blocks: it did not wait for it.
    assert not finished.is_set()
    assert 300 <= result.duration_ms < 10_000
    release.set()
    assert finished.wait(10), "the abandoned tool never ran to its end"


# --- Events -----------------------------------------------------------------------------------


def _progress_tool(reg: ToolRegistry) -> None:
    @reg.tool
    def steps(ctx: ToolContext, n: int) -> dict:
        """Report n progress steps."""
        for i in range(n + 1):
            ctx.emit_progress(i * 100 / n, f"step {i}")
        ctx.emit("done", {"n": n})
        return {"success": True}

    @reg.tool
    async def asteps(ctx: ToolContext, n: int) -> dict:
        """Report n progress steps, asynchronously."""
        for i in range(n + 1):
            ctx.emit_progress(i * 100 / n, f"step {i}")
            await asyncio.sleep(0)
        ctx.emit("done", {"n": n})
        return {"success": True}


@pytest.mark.parametrize("name", ["steps", "asteps"])
def test_events_arrive_in_order_on_the_callers_thread(make_context, events, name):
    reg = ToolRegistry()
    _progress_tool(reg)
    result = run(reg, name, '{"n": 200}', make_context())
    assert result.status == "succeeded"
    progress = events.of_type("tool.progress")
    assert [p["message"] for p in progress] == [f"step {i}" for i in range(201)]
    assert progress[-1]["percent"] == 100
    assert all(p["name"] == name for p in progress)
    assert events[-1] == (
        "tool.event",
        {
            "tool_call_id": progress[0]["tool_call_id"],
            "name": name,
            "type": "done",
            "data": {"n": 200},
        },
    )
    assert set(events.threads) == {threading.get_ident()}


def test_a_failing_sink_does_not_fail_the_call(make_context, caplog):
    reg = ToolRegistry()
    _progress_tool(reg)

    def sink(event_type, data):
        raise RuntimeError("channel layer down")

    result = run(reg, "steps", '{"n": 2}', make_context(sink=sink))
    assert result.status == "succeeded"
    assert "the event sink failed" in caplog.text


# --- Truncation --------------------------------------------------------------------------------


def test_a_megabyte_result_is_cut_to_the_limit_and_kept_whole_for_the_audit(make_context, caplog):
    reg = ToolRegistry()

    @reg.tool
    def huge(ctx: ToolContext) -> dict:
        """Return about a megabyte."""
        return {"success": True, "data": "x" * 1_000_000}

    result = run(reg, "huge", "{}", make_context())
    full = json.dumps(result.result, ensure_ascii=False)
    assert result.status == "succeeded"
    assert result.truncated
    assert result.result_chars == len(full) > 1_000_000
    assert result.result["data"] == "x" * 1_000_000
    assert len(result.content) <= 10_000
    assert result.content.startswith(full[:9_000])
    cut = int(re.search(r"truncated: (\d+) of (\d+) characters cut", result.content).group(1))
    assert cut == len(full) - result.content.index("\n...[truncated")
    assert str(len(full)) in result.content
    fields = result.execution_fields()
    assert fields["truncated"] is True
    assert fields["result_chars"] == len(full)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("TOOL_RESULT_MAX_CHARS=10000" in r.getMessage() for r in warnings)


def test_the_limit_comes_from_settings_and_applies_to_str_results(reg, make_context, settings):
    settings.TOOL_RESULT_MAX_CHARS = 100
    result = run(reg, "echo", json.dumps({"text": "y" * 500}), make_context())
    assert result.truncated
    assert len(result.content) <= 100
    assert result.content.startswith("y")
    assert result.result == "y" * 500
    assert result.result_chars == 500


@given(text=st.text(max_size=400), limit=st.integers(min_value=60, max_value=400))
def test_truncate_content_never_exceeds_the_limit_and_says_what_it_cut(text, limit):
    content, truncated = truncate_content(text, limit)
    assert truncated == (len(text) > limit)
    assert len(content) <= limit
    if truncated:
        kept = content.index("\n...[truncated")
        assert content[:kept] == text[:kept]
        assert f"{len(text) - kept} of {len(text)} characters cut" in content
    else:
        assert content == text


# --- Sensitive parameters ----------------------------------------------------------------------


def test_sensitive_values_are_masked_in_audit_and_logs(reg, make_context, caplog):
    caplog.set_level(logging.DEBUG, logger="tools")
    secret = "sk-very-secret-value"
    result = run(reg, "login", json.dumps({"user": "ann", "api_key": secret}), make_context())
    assert result.status == "succeeded"
    assert result.audit_arguments == {"user": "ann", "api_key": "***"}
    assert secret not in caplog.text
    assert secret not in json.dumps(result.execution_fields(), default=str)

    invalid = run(reg, "login", json.dumps({"user": 5, "api_key": secret}), make_context())
    assert invalid.audit_arguments == {"user": 5, "api_key": "***"}
    assert secret not in invalid.content

    broken = run(reg, "login", '{"api_key": "' + secret, make_context())
    assert broken.status == "failed"
    assert broken.arguments_raw == "***"

    bare = run(reg, "login", json.dumps(secret), make_context())
    assert bare.error_type == "invalid_arguments"
    assert bare.arguments_raw == "***"
    assert secret not in caplog.text


# --- Databases and threads ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_resources_made_in_the_tool_thread_link_the_result(make_context, user):
    reg = ToolRegistry()

    @reg.tool(idempotent=False)
    def make(ctx: ToolContext, title: str) -> dict:
        """Create a resource."""
        resource = ctx.resources.create("note", title)
        return {"success": True, "id": str(resource.pk)}

    result = run(reg, "make", '{"title": "t"}', make_context(user=user))
    assert result.status == "succeeded"
    assert result.resource_id == result.result["id"]


def test_tool_threads_close_their_database_connections(reg, make_context, monkeypatch):
    closed_in: list[int] = []
    real_close_all = connections.close_all

    def spy() -> None:
        closed_in.append(threading.get_ident())
        real_close_all()

    monkeypatch.setattr(connections, "close_all", spy)
    run(reg, "add", '{"a": 1}', make_context())
    run(reg, "explode", "{}", make_context())
    assert len(closed_in) == 2
    assert threading.get_ident() not in closed_in


# --- Ended without running ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("helper", "status", "words"),
    [
        (rejected_result, "rejected", "rejected by the user"),
        (interrupted_result, "interrupted", "interrupted"),
        (cancelled_result, "cancelled", "cancelled"),
    ],
)
def test_results_for_calls_that_did_not_run(helper, status, words):
    result = helper("record_note", "the user said no", tool_call_id="call_9")
    body = assert_readable_failure(result, status, "record_note", words)
    assert result.tool_call_id == "call_9"
    assert body["details"] == {"reason": "the user said no"}
    assert result.error_type == status


def test_statuses_are_execution_statuses_and_fields_are_columns(reg, make_context):
    assert {s.value for s in ToolStatus} <= set(ExecutionStatus.values)
    columns = {f.name for f in ToolExecution._meta.get_fields()}
    assert set(run(reg, "add", '{"a": 1}', make_context()).execution_fields()) <= columns


@pytest.mark.django_db(transaction=True)
def test_an_async_tool_uses_the_orm_through_sync_to_async(make_context, user, monkeypatch):
    from asgiref.sync import sync_to_async

    reg = ToolRegistry()

    @reg.tool(idempotent=False)
    async def amake(ctx: ToolContext, title: str) -> dict:
        """Create a resource from async code."""

        def create() -> tuple[str, int]:
            return str(ctx.resources.create("note", title).pk), threading.get_ident()

        resource_id, thread = await sync_to_async(create)()
        return {"success": True, "id": resource_id, "thread": thread}

    closed_in: list[int] = []
    real_close_all = connections.close_all

    def spy() -> None:
        closed_in.append(threading.get_ident())
        real_close_all()

    monkeypatch.setattr(connections, "close_all", spy)
    result = run(reg, "amake", '{"title": "from async"}', make_context(user=user))
    assert result.status == "succeeded", result.content
    assert result.resource_id == result.result["id"]
    # The ORM ran in the tool's thread, the one whose connections were closed.
    assert closed_in == [result.result["thread"]]


# --- cancellation from outside (the run was cancelled) -------------------------------------


def test_a_cancelled_call_stops_the_wait_and_a_tool_that_reports_progress(make_context, events):
    reg = ToolRegistry()
    steps: list[int] = []
    stopped = threading.Event()

    @reg.tool(timeout=30)
    def crunch(ctx: ToolContext) -> dict:
        """Work in many small steps, reporting progress."""
        try:
            for step in range(300):
                steps.append(step)
                ctx.emit_progress(step / 3, f"step {step}")
                time.sleep(0.01)
        finally:
            stopped.set()
        return {"success": True}

    context = make_context()
    threading.Timer(0.3, context.cancel).start()
    started = time.monotonic()
    result = run(reg, "crunch", "{}", context)
    assert result.status == ToolStatus.CANCELLED
    assert "cancelled" in payload(result)["error"]
    assert time.monotonic() - started < 2  # not the 3 s the tool would take
    assert stopped.wait(10), "the tool never ended"
    assert len(steps) < 100  # progress() raised: the tool stopped, it did not run on
    percents = [e["percent"] for e in events.of_type("tool.progress")]
    assert percents == sorted(percents)


def test_a_cancelled_call_whose_tool_ignores_it_is_abandoned(make_context, release):
    reg = ToolRegistry()

    @reg.tool(timeout=30)
    def stubborn(ctx: ToolContext) -> dict:
        """Wait without looking at the context."""
        release.wait(10)
        return {"success": True}

    context = make_context()
    threading.Timer(0.3, context.cancel).start()
    started = time.monotonic()
    result = run(reg, "stubborn", "{}", context)
    assert result.status == ToolStatus.CANCELLED
    assert time.monotonic() - started < 2
