"""The continuation decision: what follows a step whose tool calls have all answered."""

from __future__ import annotations

import json
import re

import pytest

from chat.engine.continuation import (
    COMPOSE_INSTRUCTION,
    DECISION_SCHEMA,
    STEP_LIMIT_INSTRUCTION,
    Action,
    Decision,
    ParsedDecision,
    decide_after_tools,
    decider_instruction,
    direct_reply,
    parse_decision,
)


@pytest.mark.parametrize(
    ("mode", "steps_done", "max_steps", "return_direct", "expected"),
    [
        # two_pass: always one composing call, whatever the steps.
        (
            "two_pass",
            1,
            5,
            False,
            Decision(Action.COMPOSE, COMPOSE_INSTRUCTION, "offline/compose-m"),
        ),
        (
            "two_pass",
            9,
            5,
            False,
            Decision(Action.COMPOSE, COMPOSE_INSTRUCTION, "offline/compose-m"),
        ),
        # loop: tools again below the bound, then one last call without them.
        ("loop", 1, 5, False, Decision(Action.CALL_WITH_TOOLS, model="m")),
        ("loop", 4, 5, False, Decision(Action.CALL_WITH_TOOLS, model="m")),
        (
            "loop",
            5,
            5,
            False,
            Decision(Action.COMPOSE, STEP_LIMIT_INSTRUCTION, "offline/compose-m"),
        ),
        (
            "loop",
            6,
            5,
            False,
            Decision(Action.COMPOSE, STEP_LIMIT_INSTRUCTION, "offline/compose-m"),
        ),
        # llm: the decider again below the bound, then one last call without tools.
        ("llm", 1, 2, False, Decision(Action.DECIDE, model="m")),
        ("llm", 2, 2, False, Decision(Action.COMPOSE, STEP_LIMIT_INSTRUCTION, "offline/compose-m")),
        # direct, and any mode once a return_direct tool ran: no further model call.
        ("direct", 1, 5, False, Decision(Action.DIRECT)),
        ("two_pass", 1, 5, True, Decision(Action.DIRECT)),
        ("loop", 1, 5, True, Decision(Action.DIRECT)),
        ("llm", 1, 5, True, Decision(Action.DIRECT)),
    ],
)
def test_the_policy_decides_by_mode_steps_and_return_direct(
    settings, mode, steps_done, max_steps, return_direct, expected
):
    settings.LLM_COMPOSE_MODEL = "compose-m"
    decision = decide_after_tools(
        mode=mode,
        steps_done=steps_done,
        max_steps=max_steps,
        return_direct=return_direct,
        model="m",
    )
    assert decision == expected


@pytest.mark.parametrize(
    ("compose_model", "conversation_model", "llm_model", "expected"),
    [
        # Each is the model's id, `<provider>/<model>` (one provider: `offline`).
        ("cheap", "chosen", "default", "offline/cheap"),
        ("", "chosen", "default", "chosen"),
        ("", "", "default", "offline/default"),
    ],
)
@pytest.mark.parametrize(
    ("mode", "steps_done"),
    [
        ("two_pass", 1),
        ("loop", 5),  # the last call, without tools, once the steps are spent
        ("llm", 5),
    ],
)
def test_the_composing_call_uses_the_compose_model_when_one_is_set(
    settings, mode, steps_done, compose_model, conversation_model, llm_model, expected
):
    settings.LLM_COMPOSE_MODEL = compose_model
    settings.LLM_MODEL = llm_model
    decision = decide_after_tools(
        mode=mode, steps_done=steps_done, max_steps=5, return_direct=False, model=conversation_model
    )
    assert decision.action == Action.COMPOSE
    assert decision.model == expected


@pytest.mark.parametrize(
    ("contents", "expected"),
    [
        (['{"success": true, "message": "Saved."}'], "Saved."),
        (['{"message": "One."}', '{"message": "Two."}'], "One.\nTwo."),
        (['{"success": false, "error": "no such note"}'], "That did not work: no such note"),
        (['{"success": false}'], "That did not work: unknown error"),
        (['"a plain string"'], "a plain string"),
        (["  not JSON  "], "not JSON"),
        (['{"value": 4}'], '{"value": 4}'),
        # A result without a message is shown as JSON, as written, and at most 2,000 characters.
        (['{"city": "Zürich"}'], '{"city": "Zürich"}'),
        (['{"rows": "' + "x" * 3000 + '"}'], '{"rows": "' + "x" * 1990),
        (["", '{"message": ""}'], '{"message": ""}'),
        ([], "Done."),
        ([""], "Done."),
    ],
)
def test_a_direct_reply_is_the_tools_messages(contents, expected):
    assert direct_reply(contents) == expected


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            '{"done": false, "next_tool": " calculator ", "arguments": {"expression": "2+2"}}',
            ParsedDecision("calculator", {"expression": "2+2"}, None),
        ),
        (
            '{"done": false, "next_tool": "calculator", "arguments": [1]}',
            ParsedDecision("calculator", {}, None),
        ),
        ('{"done": true, "final_output": "It is 4."}', ParsedDecision(None, {}, "It is 4.")),
        # Done wins over a tool named anyway: the reply is given, nothing more runs.
        (
            '{"done": true, "next_tool": "calculator", "arguments": {}, "final_output": "4."}',
            ParsedDecision(None, {}, "4."),
        ),
        ('{"done": false, "next_tool": "  ", "final_output": "x"}', ParsedDecision(None, {}, "x")),
        ('{"done": true, "final_output": "  "}', ParsedDecision(None, {}, None)),
        ("It is 4.", ParsedDecision(None, {}, "It is 4.")),
        ("[1, 2]", ParsedDecision(None, {}, "[1, 2]")),
        ("", ParsedDecision(None, {}, None)),
        (None, ParsedDecision(None, {}, None)),
    ],
)
def test_a_decider_answer_is_a_tool_to_run_or_the_reply(content, expected):
    assert parse_decision(content) == expected


@pytest.mark.parametrize(
    "functions",
    [
        [],
        [{"name": "calculator", "parameters": {"type": "object"}}],
        [
            {"name": "get_weather", "description": "Le temps à Zürich", "parameters": {}},
            {"name": "record_note", "description": "Note something", "parameters": {}},
        ],
    ],
)
def test_the_decider_is_shown_the_tools_schemas_as_written(functions):
    tools = [{"type": "function", "function": function} for function in functions]
    instruction = decider_instruction(tools)
    listed = re.search(r"<tools>(.*)</tools>", instruction, re.DOTALL)
    assert listed is not None
    assert json.loads(listed.group(1)) == functions
    # Unescaped, as the model would write them back.
    assert listed.group(1) == json.dumps(functions, ensure_ascii=False)
    assert "{done, next_tool, arguments, final_output}" in instruction


def test_the_decider_is_shown_both_answers_with_the_schemas_own_keys():
    instruction = decider_instruction([])
    shown = re.findall(r"(\w+)=(\w+)", instruction)
    assert {key for key, _ in shown} == set(DECISION_SCHEMA["required"])
    assert ("done", "false") in shown  # a tool to run
    assert ("done", "true") in shown  # or the reply
