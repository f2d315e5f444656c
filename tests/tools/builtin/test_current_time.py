"""get_current_time: IANA names, cities, offsets; unknown zones get suggestions."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from tools.executor import execute_tool


def now_in(make_context, **arguments):
    return execute_tool(
        name="get_current_time", arguments=json.dumps(arguments), context=make_context()
    )


@pytest.mark.parametrize(
    ("asked", "zone"),
    [
        ({}, "UTC"),
        ({"timezone": "Europe/Paris"}, "Europe/Paris"),
        ({"timezone": "europe/paris"}, "Europe/Paris"),
        ({"timezone": "Tokyo"}, "Asia/Tokyo"),
        ({"timezone": "new york"}, "America/New_York"),
        ({"timezone": "Sao Paulo"}, "America/Sao_Paulo"),
        ({"timezone": "port-au-prince"}, "America/Port-au-Prince"),
        ({"timezone": "PST"}, "America/Los_Angeles"),
        ({"timezone": "UTC+5:30"}, "UTC+05:30"),
        ({"timezone": "GMT-3"}, "UTC-03:00"),
        ({"timezone": " "}, "UTC"),
    ],
)
def test_zones_people_name(make_context, asked, zone):
    result = now_in(make_context, **asked)
    assert result.status == "succeeded", result.content
    data = result.result
    assert data["timezone"] == zone
    moment = datetime.fromisoformat(data["datetime"])
    assert abs(moment - datetime.now(UTC)) < timedelta(seconds=5)
    assert data["message"].startswith("It is ")
    assert zone in data["message"]


def test_offset_and_fields_are_consistent(make_context):
    data = now_in(make_context, timezone="Asia/Kolkata").result
    assert data["utc_offset"] == "+05:30"
    assert data["datetime"].endswith("+05:30")
    assert data["date"] == data["datetime"][:10]
    assert data["time"] == data["datetime"][11:19]


@pytest.mark.parametrize(
    ("asked", "suggestion"), [("Tokio", "Asia/Tokyo"), ("Europe/Pariss", "Europe/Paris")]
)
def test_unknown_zones_are_a_clear_error_with_suggestions(make_context, asked, suggestion):
    result = now_in(make_context, timezone=asked)
    assert result.status == "failed"
    body = json.loads(result.content)
    assert body["success"] is False
    assert body["error"] == f"Unknown time zone {asked!r}."
    assert suggestion in body["suggestions"]
    assert suggestion in body["message"]


def test_nonsense_gets_an_error_and_a_hint(make_context):
    body = json.loads(now_in(make_context, timezone="qqqqqq").content)
    assert body["success"] is False
    assert body["suggestions"] == []
    assert "IANA name" in body["message"]
