"""The offline model fills a tool's arguments from its JSON Schema: a table of schemas, words, arguments.

Each row is a tool's parameters (as an MCP server or `@tool` declares them), what
the user said, the things with ids earlier results listed, and the arguments
the model must send.
"""

from __future__ import annotations

from typing import Any

import pytest

from chat.llm.offline.arguments import Tool, fill
from chat.llm.offline.history import Listed
from chat.llm.offline.kinds import clock_time
from chat.llm.offline.reading import reading_of


def schema(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required or []}


def text(description: str = "") -> dict[str, Any]:
    return {"type": "string", "description": description} if description else {"type": "string"}


CALCULATOR = ("calculator", schema({"expression": text()}, ["expression"]))
DATASET = ("generate_dataset", schema({"rows": {"type": "integer"}}, ["rows"]))
THERMOMETER = (
    "convert_temperature",
    schema(
        {
            "value": {"type": "number"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit", "kelvin"]},
        },
        ["value", "unit"],
    ),
)
HEATER = (
    "set_heater",
    schema({"level": {"type": "string", "enum": ["low", "high"]}}, ["level"]),
)
THEME = (
    "set_theme",
    schema({"theme": {"type": "string", "enum": ["light_mode", "dark_mode"]}}, ["theme"]),
)
CLOCK = ("get_current_time", schema({"timezone": text()}))
# A zone known only by its description.
WORLD_CLOCK = ("world_clock", schema({"where": text("An IANA timezone name")}, ["where"]))
# mcp-server-time's convert_time, as its server declares it.
CONVERT = (
    "time__convert_time",
    schema(
        {
            "source_timezone": text("Source IANA timezone name (e.g., 'America/New_York')"),
            "time": text("Time to convert in 24-hour format (HH:MM)"),
            "target_timezone": text("Target IANA timezone name (e.g., 'Asia/Tokyo')"),
        },
        ["source_timezone", "time", "target_timezone"],
    ),
)
ALARM = ("set_alarm", schema({"at": {"type": "string", "format": "time"}}, ["at"]))
DELETE = (
    "delete_notes",
    schema({"note_ids": {"type": "array", "items": {"type": "string"}}}, ["note_ids"]),
)
OPEN_NOTE = ("open_note", schema({"note_id": text()}, ["note_id"]))
RECORD = ("record_note", schema({"title": text(), "body": text()}, ["title"]))
TITLE_ONLY = ("add_task", schema({"title": text()}, ["title"]))
LABEL = ("tag_item", schema({"label": text()}, ["label"]))
SEARCH = ("search_notes", schema({"query": text(), "limit": {"type": "integer"}}, ["query"]))
ODD = ("odd_tool", {"type": "object", "properties": {"x": True, "y": text()}, "required": "x"})

KETTLE = Listed("n-kettle", "the kettle needs descaling")
BOILER = Listed("n-boiler", "the boiler needs descaling")
SEARCHED = [[KETTLE, BOILER]]

CASES = [
    (CALCULATOR, "what is 12 times 7", [], {"expression": "12*7"}),
    (CALCULATOR, "what's (3 + 4) * 2", [], {"expression": "(3 + 4) * 2"}),
    (DATASET, "generate a dataset of 500 rows", [], {"rows": 500}),
    (THERMOMETER, "convert 21.5 to fahrenheit", [], {"value": 21.5, "unit": "fahrenheit"}),
    (THERMOMETER, "convert 21.5 to rankine", [], {"value": 21.5}),
    (HEATER, "set the heater to high, following the schedule", [], {"level": "high"}),
    (THEME, "switch to dark mode", [], {"theme": "dark_mode"}),
    (CLOCK, "what time is it in Tokyo", [], {"timezone": "Asia/Tokyo"}),
    (CLOCK, "what time is it in Japan", [], {"timezone": "Asia/Tokyo"}),
    (
        CLOCK,
        "what time is it in America/Argentina/Buenos_Aires",
        [],
        {"timezone": "America/Argentina/Buenos_Aires"},
    ),
    (CLOCK, "what time is it", [], {}),
    (WORLD_CLOCK, "the time in new york please", [], {"where": "America/New_York"}),
    (
        CONVERT,
        "Convert 14:00 from Paris to New York",
        [],
        {"source_timezone": "Europe/Paris", "time": "14:00", "target_timezone": "America/New_York"},
    ),
    (
        CONVERT,
        "convert 14:00 from Europe/Paris to America/New_York",
        [],
        {"source_timezone": "Europe/Paris", "time": "14:00", "target_timezone": "America/New_York"},
    ),
    (
        CONVERT,
        "what is 2pm New York time in London",
        [],
        {
            "source_timezone": "America/New_York",
            "time": "14:00",
            "target_timezone": "Europe/London",
        },
    ),
    (
        CONVERT,
        "convert noon to Japan time from France",
        [],
        {"source_timezone": "Europe/Paris", "time": "12:00", "target_timezone": "Asia/Tokyo"},
    ),
    (
        CONVERT,
        "convert from Paris to Tokyo",
        [],
        {"source_timezone": "Europe/Paris", "target_timezone": "Asia/Tokyo"},
    ),
    (ALARM, "wake me at 6:30 pm", [], {"at": "18:30:00"}),
    (DELETE, "delete them", SEARCHED, {"note_ids": ["n-kettle", "n-boiler"]}),
    (DELETE, "delete the note about the kettle", SEARCHED, {"note_ids": ["n-kettle"]}),
    (DELETE, "delete them", [[BOILER], [KETTLE]], {"note_ids": ["n-kettle"]}),
    (DELETE, "delete them", [], {}),
    (OPEN_NOTE, "open the boiler note", SEARCHED, {"note_id": "n-boiler"}),
    (
        RECORD,
        "note that **the boiler** needs `descaling`: - filter - valve",
        [],
        {"title": "the boiler needs descaling", "body": "- filter - valve"},
    ),
    (RECORD, "note that the meeting is at 14:30", [], {"title": "the meeting is at 14:30"}),
    (TITLE_ONLY, "add a task buy milk: and eggs", [], {"title": "buy milk: and eggs"}),
    (LABEL, "tag it 'urgent'", [], {"label": "urgent"}),
    (SEARCH, "search my notes for kettle", [], {"query": "kettle"}),
    (SEARCH, "list my notes", [], {"query": ""}),
    (ODD, "odd tool with fish", [], {"y": "fish"}),
]


@pytest.mark.parametrize(
    ("tool", "sentence", "known", "arguments"),
    CASES,
    ids=[f"{tool[0]}: {sentence}" for tool, sentence, _, _ in CASES],
)
def test_arguments_come_from_the_schema_and_the_words(tool, sentence, known, arguments):
    name, parameters = tool
    offered = Tool(name=name, description="", parameters=parameters)
    assert fill(offered, reading_of(sentence, None, None, known)) == arguments


@pytest.mark.parametrize(
    ("words", "clock"),
    [
        ("at 14:00", "14:00"),
        ("at 9:05", "09:05"),
        ("at 2pm", "14:00"),
        ("at 2 p.m.", "14:00"),
        ("at 12am", "00:00"),
        ("at 12:30 pm", "12:30"),
        ("at midnight", "00:00"),
        ("at noon", "12:00"),
        ("in 5 minutes", None),
        ("at 25:00", None),
    ],
)
def test_a_time_of_day_is_read_as_a_clock_time(words, clock):
    assert clock_time(words) == clock
