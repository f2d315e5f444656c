"""generate_dataset: slow, with ordered progress to 100, and it truncates its own output."""

from __future__ import annotations

import itertools
import json
import time

from tools.executor import execute_tool


def test_a_thousand_rows_with_ordered_progress(make_context, events):
    started = time.monotonic()
    result = execute_tool(
        name="generate_dataset", arguments='{"rows": 1000}', context=make_context()
    )
    elapsed = time.monotonic() - started
    assert result.status == "succeeded"
    # About a second per 1,000 rows by design (it sleeps); the upper bound only
    # catches a tool that never stops, whatever the machine's load.
    assert 0.9 <= elapsed < 30, elapsed

    percents = [e["percent"] for e in events.of_type("tool.progress")]
    assert percents[0] == 0
    assert percents[-1] == 100
    assert percents == sorted(percents)
    assert max(b - a for a, b in itertools.pairwise(percents)) <= 10

    data = result.result
    assert data["rows_generated"] == 1000
    assert data["returned"] == len(data["data"]) == 100
    assert data["truncated"] is True
    assert sum(data["summary"]["by_category"].values()) == 1000
    assert data["message"] == "Generated 1000 rows; showing the first 100."
    assert not result.truncated
    assert result.result_chars < 10_000


def test_small_datasets_are_returned_whole_and_are_repeatable(make_context):
    first = execute_tool(
        name="generate_dataset", arguments='{"rows": 7, "limit": 50}', context=make_context()
    )
    again = execute_tool(
        name="generate_dataset", arguments='{"rows": 7, "limit": 50}', context=make_context()
    )
    assert first.result["returned"] == 7
    assert first.result["message"] == "Generated 7 rows; all are returned."
    assert first.result["data"] == again.result["data"]


def test_rows_are_validated(make_context):
    for arguments in ('{"rows": 0}', '{"rows": 1000000}', '{"rows": 10, "limit": 1000}'):
        result = execute_tool(name="generate_dataset", arguments=arguments, context=make_context())
        assert result.status == "failed"
        assert json.loads(result.content)["details"]["errors"]
