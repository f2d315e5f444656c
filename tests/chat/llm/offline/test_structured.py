"""The offline model's structured answers validate against the schema they answer."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from chat.llm.offline.history import TurnResult
from chat.llm.offline.structured import conversation_of, schema_value

ASKED = [{"role": "user", "content": "What is 6*7 in Paris?"}]
RESULTS = [TurnResult("calculator", {"expression": "6*7"}, {"result": 42, "expression": "6*7"})]

SCHEMAS = {
    "nested models and an optional": {
        "type": "object",
        "properties": {
            "answer": {"type": "string"},
            "value": {"type": "integer"},
            "step": {"$ref": "#/$defs/Step"},
            "remark": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "required": ["answer", "value", "step", "remark"],
        "additionalProperties": False,
        "$defs": {
            "Step": {
                "type": "object",
                "properties": {"description": {"type": "string"}, "weight": {"type": "number"}},
                "required": ["description", "weight"],
                "additionalProperties": False,
            }
        },
    },
    "bounds, enums, const and formats": {
        "type": "object",
        "properties": {
            "mood": {"enum": ["calm", "busy"]},
            "kind": {"const": "report"},
            "score": {"type": "integer", "minimum": 50, "maximum": 60},
            "ratio": {"type": "number", "exclusiveMaximum": 1},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "code": {"type": "string", "minLength": 3, "maxLength": 5},
            "when": {"type": "string", "format": "date"},
            "done": {"type": "boolean"},
            "nothing": {"type": "null"},
        },
        "required": ["mood", "kind", "score", "ratio", "tags", "code", "when", "done", "nothing"],
    },
    "allOf and types as lists": {
        "allOf": [
            {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            {"properties": {"count": {"type": ["integer", "null"]}}, "required": ["count"]},
        ]
    },
}


@pytest.mark.parametrize("name", SCHEMAS)
def test_a_value_validates_against_its_schema(name):
    schema = SCHEMAS[name]
    value = schema_value(schema, conversation_of(ASKED, RESULTS, "6*7 = 42."))
    assert list(Draft202012Validator(schema).iter_errors(value)) == []


def test_values_come_from_the_results_the_answer_and_the_words():
    schema = SCHEMAS["nested models and an optional"]
    value = schema_value(schema, conversation_of(ASKED, RESULTS, "6*7 = 42."))
    assert value["answer"] == "6*7 = 42."
    assert value["value"] == 42
    expression = schema_value(
        {"type": "object", "properties": {"expression": {"type": "string"}}},
        conversation_of(ASKED, RESULTS, ""),
    )
    assert expression == {"expression": "6*7"}  # a result's field of the same name


def test_a_property_not_required_is_left_out_unless_the_conversation_gives_it():
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}, "colour": {"type": "boolean"}},
    }
    assert schema_value(schema, conversation_of(ASKED, [], "Hi.")) == {"answer": "Hi."}


def test_a_planned_calls_arguments_are_kept_and_completed():
    schema = {
        "type": "object",
        "properties": {"order": {"type": "string"}, "count": {"type": "integer"}},
        "required": ["order", "count"],
    }
    value = schema_value(schema, conversation_of(ASKED, [], ""), seed={"order": "A-1"})
    assert value["order"] == "A-1"
    assert isinstance(value["count"], int)
