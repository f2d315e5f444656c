"""No test waits a fixed time for something to have happened: it waits for the thing.

A fixed sleep (`time.sleep`, `asyncio.sleep`, Playwright's `wait_for_timeout`)
standing in for "the coroutine has reached its wait", "the message has
arrived", "the page has updated" flakes on a loaded machine and hides races:
a test waits on the condition instead (tests/assertions.py `wait_until`,
`wait_until_async`, `wait_until_on_page`; Playwright's `expect`; an event the
code sets). What is left is listed below, each with why the time itself is
the point: a poll that looks again, a scripted server or tool whose work
takes time, an outage or an idle spell that is the scenario, a wait whose
length the test then measures. `asyncio.sleep(0)`, a yield, is not a wait.

toolchat's issue asked for at most three unlisted ones; the limit is none,
so that a new sleep is either a wait on its condition or listed here with its
reason, where a review sees it, rather than quietly taking one of three places.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

# Unlisted fixed sleeps allowed (the code-health goal was at most 3; none is kept).
MAX_UNLISTED = 0

# Whole files whose sleeps are the time something takes, or a poll's interval.
FILES = {
    "tests/assertions.py": "the polling helpers: each sleep is between two looks at a condition",
    "tests/stack.py": "polls for the stack's services to answer (or to stop)",
    "tests/plugins/": "the fixtures' polls for their servers and services to come up",
    "tests/llm_server.py": "the scripted model server: a reply's delay, trickle and silence",
    "tests/chat/engine/slow_tools.py": "tools that take time on purpose",
    "tests/tools/mcp/server.py": "a scripted MCP server: tools that take time, late replies",
    "tests/tools/mcp/servers.py": "a scripted MCP server's slow start and slow tools",
    "tests/project/request_thread_urls.py": "a view that takes as long as it is asked to",
}

# (file, the call as written): one entry per occurrence, each with its reason.
CALLS = [
    (
        "tests/chat/engine/test_broker_outage.py",
        "time.sleep(down_s)",
        "the outage itself: what follows it is tested",
    ),
    (
        "tests/chat/engine/test_database_outage.py",
        "time.sleep(max(0.0, DOWN_S - (time.monotonic() - down_at)))",
        "the outage itself, DOWN_S long",
    ),
    (
        "tests/chat/engine/test_database_outage.py",
        "time.sleep(DOWN_S)",
        "the outage itself, DOWN_S long",
    ),
    (
        "tests/chat/engine/test_approval.py",
        "time.sleep(0.3)",
        "a person reads the request: the test asserts it as the run's approval wait",
    ),
    (
        "tests/chat/engine/test_approval.py",
        "time.sleep(0.2)",
        "a person reads the request before a cancel: asserted as the approval wait",
    ),
    (
        "tests/chat/telemetry/test_metrics.py",
        "time.sleep(1.0)",
        "a person reads the request: asserted as the approval wait the metric counts",
    ),
    (
        "tests/chat/engine/test_turn.py",
        "time.sleep(0.037)",
        "samples of the pool spread over several beats, not a wait for anything",
    ),
    (
        "tests/chat/live/test_sender.py",
        "time.sleep(0.35)",
        "the pause after a failed send passing (SEND_RETRY_S) is the behaviour tested",
    ),
    (
        "tests/chat/live/test_streams.py",
        "asyncio.sleep(1.5)",
        "an idle stream over several catch-up spells: that it reads nothing is tested",
    ),
    (
        "tests/chat/live/test_streams.py",
        "asyncio.sleep(1.0)",
        "a quiet subscription over three keep-alive PINGs, which must not end it",
    ),
    (
        "tests/chat/live/test_streams.py",
        "asyncio.sleep(2.0)",
        "a quiet subscription over six PINGs and health checks, which must not end it",
    ),
    (
        "tests/chat/live/test_layers.py",
        "asyncio.sleep(RedisChannelLayer.brpop_timeout + 2)",
        "idle for longer than one blocking pop, which the receive must outlast",
    ),
    (
        "tests/chat/llm/test_watch_stream.py",
        "time.sleep(self.gap_s)",
        "a response body from a slow server: the gaps are what the watch measures",
    ),
    (
        "tests/chat/test_message_rate.py",
        "time.sleep(0.02)",
        "a cache read as slow as a busy Redis, so that concurrent posts overlap",
    ),
    (
        "tests/tools/test_executor.py",
        "asyncio.sleep(30)",
        "an async tool that takes too long: its timeout is tested",
    ),
    (
        "tests/tools/test_executor.py",
        "time.sleep(0.01)",
        "a tool's work, in steps: its cancel between them is tested",
    ),
]

SLEEPS = {("time", "sleep"), ("asyncio", "sleep"), ("anyio", "sleep")}


def _is_sleep(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Attribute):
        if func.attr == "wait_for_timeout":  # Playwright's, on any page or frame
            return True
        if isinstance(func.value, ast.Name) and (func.value.id, func.attr) in SLEEPS:
            # asyncio.sleep(0) yields to the loop: no time is waited for.
            zero = call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value == 0
            return not (func.value.id == "asyncio" and zero)
    return isinstance(func, ast.Name) and func.id == "sleep"  # from time import sleep


def sleeps_found() -> Counter[tuple[str, str]]:
    """Every sleep call in tests/, as (file, the call as written)."""
    found: Counter[tuple[str, str]] = Counter()
    for path in sorted(TESTS.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if any(name == f or (f.endswith("/") and name.startswith(f)) for f in FILES):
            continue
        source = path.read_text()
        for node in ast.walk(ast.parse(source, filename=name)):
            if isinstance(node, ast.Call) and _is_sleep(node):
                found[(name, ast.get_source_segment(source, node) or "")] += 1
    return found


def test_the_fixed_sleeps_left_in_tests_are_listed_with_their_reasons():
    found = sleeps_found()
    listed = Counter((path, call) for path, call, _ in CALLS)
    unlisted = sorted((found - listed).elements())
    assert len(unlisted) <= MAX_UNLISTED, (
        "a test sleeps a fixed time instead of waiting for what it waits on "
        "(tests/assertions.py's waits, Playwright's expect, an event); if the "
        f"time itself is the point, list it in {Path(__file__).name} with why: {unlisted}"
    )


def test_the_lists_name_only_sleeps_that_are_there():
    # A stale entry would let a later sleep in without its own reason.
    stale = sorted((Counter((p, c) for p, c, _ in CALLS) - sleeps_found()).elements())
    assert not stale, f"listed, but no longer in the tests: {stale}"
    missing = [f for f in FILES if not (ROOT / f).exists()]
    assert not missing, f"listed files that are gone: {missing}"


def test_the_scan_finds_each_kind_of_fixed_sleep():
    # The scan itself can fail: each form it must see, and the yield it must not.
    source = (
        "import asyncio, time\n"
        "from time import sleep\n"
        "async def t(page):\n"
        "    time.sleep(0.2)\n"
        "    await asyncio.sleep(0.1)\n"
        "    page.wait_for_timeout(300)\n"
        "    sleep(1)\n"
        "    await asyncio.sleep(0)\n"
    )
    calls = sorted(
        (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)), key=lambda n: n.lineno
    )
    assert [ast.get_source_segment(source, c) for c in calls if _is_sleep(c)] == [
        "time.sleep(0.2)",
        "asyncio.sleep(0.1)",
        "page.wait_for_timeout(300)",
        "sleep(1)",
    ]
