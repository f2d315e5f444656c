"""The offline model picks the right tools from plain sentences and answers from results.

Everything goes through `provider.stream(...)`, as the engine calls it.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import uuid

import pytest
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

import chat.llm.offline.provider
from chat.engine.continuation import COMPOSE_INSTRUCTION, DECISION_FORMAT
from chat.engine.suggestions import SUGGESTIONS_FORMAT, SUGGESTIONS_INSTRUCTION
from chat.llm import get_provider
from chat.llm.base import (
    ChatRequest,
    Completion,
    Done,
    ProviderStopped,
    TextDelta,
)
from chat.llm.offline import OfflineProvider, token_count
from chat.models import ExecutionStatus, Mode, RunStatus, ToolExecution
from chat.selectors import run_final_message
from chat.services.approvals import tool_call_decide
from chat.services.runs import run_start
from tests.assertions import wait_until
from tests.factories import ConversationFactory
from tests.stack import wait_for_run
from tools.builtin.calculator import calculator
from tools.builtin.current_time import get_current_time
from tools.context import ToolContext
from tools.executor import execute_tool
from tools.models import Resource
from tools.registry import registry


def function(name, description, properties, required):
    parameters = {"type": "object", "properties": properties, "required": required}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


TOOLS = [
    function(
        "calculator",
        "Evaluate an arithmetic expression.",
        {"expression": {"type": "string"}},
        ["expression"],
    ),
    function(
        "get_current_time",
        "The current date and time in a time zone.",
        {"timezone": {"type": "string", "default": "UTC"}},
        [],
    ),
    function(
        "record_note",
        "Record a note for the user: an event or a fact.",
        {"title": {"type": "string"}, "body": {"type": "string", "default": ""}},
        ["title"],
    ),
    function(
        "search_notes",
        "Find the user's notes by words in their title or body.",
        {"query": {"type": "string"}, "limit": {"type": "integer", "default": 10}},
        ["query"],
    ),
    function(
        "generate_dataset",
        "Generate a synthetic dataset (slow, reports progress).",
        {"rows": {"type": "integer"}, "limit": {"type": "integer", "default": 100}},
        ["rows"],
    ),
]
# The demo tools as `make run` offers them, with their own descriptions.
DEMO_TOOLS = registry.openai_tools(
    [
        "calculator",
        "get_current_time",
        "record_note",
        "search_notes",
        "generate_dataset",
        "delete_notes",
    ]
)
SUGGEST_INSTRUCTION = SUGGESTIONS_INSTRUCTION  # what the engine sends


def valid(messages):
    """The history is one the OpenAI API accepts."""
    TypeAdapter(list[ChatCompletionMessageParam]).validate_python(messages)


def complete(provider, request) -> Completion:
    """Run a streamed call to its end and return the completion."""
    events = list(provider.stream(request))
    done = events[-1]
    assert isinstance(done, Done)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == (
        done.completion.content or ""
    )
    return done.completion


def ask(text, tools=TOOLS):
    return complete(
        OfflineProvider(),
        ChatRequest(model="offline", messages=[{"role": "user", "content": text}], tools=tools),
    )


@pytest.mark.parametrize(
    ("sentence", "tool", "arguments"),
    [
        ("what is 12*7", "calculator", {"expression": "12*7"}),
        ("What's (3 + 4) * 2?", "calculator", {"expression": "(3 + 4) * 2"}),
        ("what is 12 times 7", "calculator", {"expression": "12*7"}),
        ("What is 1024 squared?", "calculator", {"expression": "1024**2"}),
        # A sentence's full stop is not a decimal point; one between digits is.
        ("Then add 2+2.", "calculator", {"expression": "2+2"}),
        ("Add 1.5 + 2.25.", "calculator", {"expression": "1.5 + 2.25"}),
        ("what time is it in Tokyo", "get_current_time", {"timezone": "Asia/Tokyo"}),
        (
            "what's the time in new york right now",
            "get_current_time",
            {"timezone": "America/New_York"},
        ),
        ("what time is it", "get_current_time", {}),
        (
            "note that the boiler was serviced today",
            "record_note",
            {"title": "the boiler was serviced today"},
        ),
        ("find my notes about boiler", "search_notes", {"query": "boiler"}),
        (
            "search notes for 'dentist appointment'",
            "search_notes",
            {"query": "dentist appointment"},
        ),
        ("list my notes", "search_notes", {"query": ""}),
        ("generate a dataset of 500 rows", "generate_dataset", {"rows": 500}),
    ],
)
def test_picks_the_tool_and_fills_its_arguments(sentence, tool, arguments):
    completion = ask(sentence)
    assert completion.finish_reason == "tool_calls"
    assert [(c.name, json.loads(c.arguments)) for c in completion.tool_calls] == [(tool, arguments)]
    assert completion.tool_calls[0].id.startswith("call_")


LOOKUP_ORDER = function(
    "lookup_order",
    "Look an order up by its number.",
    {"order": {"type": "string"}},
    ["order"],
)
COUNT_ITEMS = function(
    "count_items",
    "Record how many items an order has.",
    {"order": {"type": "string"}, "items": {"type": "integer"}},
    ["order", "items"],
)


@pytest.mark.parametrize(
    ("sentence", "tool", "arguments"),
    [
        # A string named in the words, followed by a code: the code, not the rest.
        ("Look up the order 1234 with lookup_order", LOOKUP_ORDER, {"order": "1234"}),
        ("Where is my order A-1?", LOOKUP_ORDER, {"order": "A-1"}),
        ("Check order #55 for me", LOOKUP_ORDER, {"order": "#55"}),
        # The digits of a code are not a number of their own.
        ("Order A-7 has 12 items", COUNT_ITEMS, {"order": "A-7", "items": 12}),
    ],
)
def test_a_client_tools_string_takes_the_code_the_words_name_it_by(sentence, tool, arguments):
    completion = ask(sentence, tools=[tool])
    assert [(c.name, json.loads(c.arguments)) for c in completion.tool_calls] == [
        (tool["function"]["name"], arguments)
    ]


def test_tool_call_ids_are_unique_across_identical_requests():
    assert ask("what is 1+1").tool_calls[0].id != ask("what is 1+1").tool_calls[0].id


def test_without_a_matching_tool_it_says_what_it_can_do():
    completion = ask("hello there")
    assert completion.tool_calls == []
    assert "`calculator`" in completion.content
    assert "`what is 2**10 and what time is it in London?`" in completion.content


def test_no_tools_offered_means_no_tool_call():
    completion = ask("what is 12*7", tools=None)
    assert completion.tool_calls == []


def test_answers_from_tool_results_and_streams_word_by_word():
    messages = [
        {"role": "user", "content": "what is 12*7"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "12*7"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": json.dumps(
                {"success": True, "result": 84, "expression": "12*7", "message": "12*7 = 84"}
            ),
        },
        {"role": "system", "content": "Answer the user naturally."},
    ]
    valid(messages)
    events = list(OfflineProvider().stream(ChatRequest(model="offline", messages=messages)))
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert deltas == ["`12*7` ", "= ", "**84**."]
    done = events[-1]
    assert isinstance(done, Done)
    assert done.completion.content == "`12*7` = **84**."


def test_a_failed_tool_is_reported_plainly():
    messages = [
        {"role": "user", "content": "what is 1/0"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": "{}"},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "c",
            "content": json.dumps({"success": False, "error": "Division by zero"}),
        },
    ]
    valid(messages)
    completion = complete(
        OfflineProvider(), ChatRequest(model="offline", messages=messages, tools=TOOLS)
    )
    assert completion.tool_calls == []
    assert completion.content == "Sorry, that did not work: Division by zero."


# --- Several requests in one message: several calls in one step ------------------------


def calls_of(completion):
    return [(c.name, json.loads(c.arguments)) for c in completion.tool_calls]


@pytest.mark.parametrize(
    ("sentence", "calls"),
    [
        (
            "what is 2**10 and what time is it in London",
            [
                ("calculator", {"expression": "2**10"}),
                ("get_current_time", {"timezone": "Europe/London"}),
            ],
        ),
        (
            "What is 2**10? What time is it in Tokyo?",
            [
                ("calculator", {"expression": "2**10"}),
                ("get_current_time", {"timezone": "Asia/Tokyo"}),
            ],
        ),
        (
            "what is 2+2 and 3*3",
            [("calculator", {"expression": "2+2"}), ("calculator", {"expression": "3*3"})],
        ),
        (
            "note that I need milk and search my notes for milk",
            [("record_note", {"title": "I need milk"}), ("search_notes", {"query": "milk"})],
        ),
        (
            "calculate 2+2, then note that the result was 4",
            [("calculator", {"expression": "2+2"}), ("record_note", {"title": "the result was 4"})],
        ),
        (
            "note that Dr. Smith called. What time is it in Paris?",
            [
                ("record_note", {"title": "Dr. Smith called"}),
                ("get_current_time", {"timezone": "Europe/Paris"}),
            ],
        ),
        (
            "what time is it in London and New York",
            [
                ("get_current_time", {"timezone": "Europe/London"}),
                ("get_current_time", {"timezone": "America/New_York"}),
            ],
        ),
        # A note that points back notes what the part before asked, not "it down".
        (
            "What is 12*7? Then note it down.",
            [("calculator", {"expression": "12*7"}), ("record_note", {"title": "12*7"})],
        ),
        (
            "what is 2**10 and note that down",
            [("calculator", {"expression": "2**10"}), ("record_note", {"title": "2**10"})],
        ),
        (
            "What time is it in Tokyo? Note it down.",
            [
                ("get_current_time", {"timezone": "Asia/Tokyo"}),
                ("record_note", {"title": "What time is it in Tokyo"}),
            ],
        ),
    ],
)
def test_several_requests_are_several_calls_in_one_step(sentence, calls):
    completion = ask(sentence)
    assert completion.finish_reason == "tool_calls"
    assert calls_of(completion) == calls
    assert len({c.id for c in completion.tool_calls}) == len(calls)


@pytest.mark.parametrize(
    ("sentence", "calls"),
    [
        (
            "note that the boiler and the valve were serviced",
            [("record_note", {"title": "the boiler and the valve were serviced"})],
        ),
        (
            "note that the dentist called then the time changed",
            [("record_note", {"title": "the dentist called then the time changed"})],
        ),
        ("Hi! What is 2+2?", [("calculator", {"expression": "2+2"})]),
        ("what is 2 and 3", []),  # "and" in arithmetic is no second request
    ],
)
def test_one_request_with_and_in_it_stays_one(sentence, calls):
    assert calls_of(ask(sentence)) == calls


# --- Follow-ups that point back --------------------------------------------------------


def turn(prompt, name, arguments, result, answer):
    """One finished turn of history: the question, the call, its result, the answer."""
    call_id = f"call_{name}_{len(prompt)}"
    return [
        {"role": "user", "content": prompt},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)},
        {"role": "assistant", "content": answer},
    ]


def calculated(expression):
    """A calculator turn with the calculator's real result."""
    result = calculator(None, expression=expression)
    return turn(f"what is {expression}", "calculator", {"expression": expression}, result, "ok")


def follow_up(history, text, tools=TOOLS):
    messages = [*history, {"role": "user", "content": text}]
    valid(messages)
    return complete(OfflineProvider(), ChatRequest(model="offline", messages=messages, tools=tools))


@pytest.mark.parametrize(
    ("text", "expression"),
    [
        ("multiply that by 3", "1024*3"),
        ("add 5 to the last result", "1024+5"),
        ("divide it by 2", "1024/2"),
        ("what is that squared", "1024**2"),
        ("that times 3", "1024*3"),
        ("subtract 24 from that", "1024-24"),
        ("what is 10% of that", "1024*10/100"),
        ("double it", "1024*2"),
        ("what is the square root of that", "1024**0.5"),
    ],
)
def test_a_follow_up_calculates_with_the_last_result(text, expression):
    completion = follow_up(calculated("2**10"), text)
    assert calls_of(completion) == [("calculator", {"expression": expression})]
    # The calculator takes what the model wrote.
    assert calculator(None, expression=expression)["success"] is True


def test_the_last_result_is_the_newest_turns():
    history = calculated("2**10") + calculated("6*7")
    assert calls_of(follow_up(history, "multiply that by 3")) == [
        ("calculator", {"expression": "42*3"})
    ]


def test_negative_and_decimal_results_are_used_as_numbers():
    assert calls_of(follow_up(calculated("2-10"), "what is that squared")) == [
        ("calculator", {"expression": "(-8)**2"})
    ]
    assert calls_of(follow_up(calculated("3/2"), "multiply that by 4")) == [
        ("calculator", {"expression": "1.5*4"})
    ]


def test_a_result_stated_in_an_earlier_answer_counts_too():
    history = [
        {"role": "user", "content": "what is six times seven?"},
        {"role": "assistant", "content": "Six times seven is **42**."},
    ]
    assert calls_of(follow_up(history, "add 8 to that")) == [("calculator", {"expression": "42+8"})]


def test_a_clock_time_is_not_a_result():
    history = turn(
        "what time is it",
        "get_current_time",
        {},
        {
            "success": True,
            "timezone": "UTC",
            "message": "It is 14:02 on Monday 3 March 2025 in UTC.",
        },
        "It is 14:02 on Monday 3 March 2025 in UTC.",
    )
    completion = follow_up(history, "multiply that by 3")
    assert completion.tool_calls == []
    assert completion.content.startswith("There is no earlier result to work with yet.")


def test_a_later_part_of_the_message_uses_the_earlier_parts_result():
    completion = ask("what is 2**10, then multiply that by 3")
    assert calls_of(completion) == [
        ("calculator", {"expression": "2**10"}),
        ("calculator", {"expression": "(2**10)*3"}),
    ]


def test_search_my_notes_for_that_searches_the_last_note():
    history = turn(
        "note that the boiler needs descaling",
        "record_note",
        {"title": "the boiler needs descaling"},
        {
            "success": True,
            "data": {"id": "1", "title": "the boiler needs descaling", "body": ""},
            "message": "Noted: the boiler needs descaling",
        },
        "Noted: the boiler needs descaling.",
    )
    assert calls_of(follow_up(history, "search my notes for that")) == [
        ("search_notes", {"query": "the boiler needs descaling"})
    ]


# --- Note titles as written ------------------------------------------------------------


@pytest.mark.parametrize(
    ("sentence", "arguments"),
    [
        (
            "note that **the boiler** needs `descaling`: - filter - valve",
            {"title": "the boiler needs descaling", "body": "- filter - valve"},
        ),
        ("note that the boiler was serviced today", {"title": "the boiler was serviced today"}),
        ("note boiler: - filter - valve", {"title": "boiler", "body": "- filter - valve"}),
        ("note boiler\nfilter\nvalve", {"title": "boiler", "body": "filter\nvalve"}),
        ("make a note: buy milk", {"title": "buy milk"}),
        ("note that the meeting is at 14:30", {"title": "the meeting is at 14:30"}),
        ("Please note that my car needs *new* tyres.", {"title": "my car needs new tyres"}),
        ("note that 2**10 is 1024", {"title": "2**10 is 1024"}),
    ],
)
def test_a_note_title_is_kept_as_the_user_wrote_it(sentence, arguments):
    assert calls_of(ask(sentence)) == [("record_note", arguments)]


# --- Clean sentences -------------------------------------------------------------------


def answer_to(*results):
    """The answer the model writes after tool calls that gave these (name, content) results."""
    calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": name, "arguments": "{}"},
        }
        for i, (name, _) in enumerate(results)
    ]
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *(
            {
                "role": "tool",
                "tool_call_id": f"call_{i}",
                "content": content if isinstance(content, str) else json.dumps(content),
            }
            for i, (_, content) in enumerate(results)
        ),
        {"role": "system", "content": COMPOSE_INSTRUCTION},
    ]
    valid(messages)
    return complete(OfflineProvider(), ChatRequest(model="offline", messages=messages)).content


RESULTS = [
    ("calculator", calculator(None, expression="2**10")),
    ("calculator", calculator(None, expression="1/3")),
    ("calculator", calculator(None, expression="1/0")),
    ("calculator", calculator(None, expression="9**9**9")),
    ("get_current_time", get_current_time(None, timezone="Europe/London")),
    ("get_current_time", get_current_time(None, timezone="Londn")),
    (
        "record_note",
        {"success": True, "data": {"title": "call mom."}, "message": "Noted: call mom."},
    ),
    ("record_note", {"success": True, "data": {"title": "wait..."}, "message": "Noted: wait..."}),
    (
        "search_notes",
        {"success": True, "data": [], "total_available": 0, "message": "There are no notes yet."},
    ),
    (
        "generate_dataset",
        {"success": True, "message": "Generated 500 rows; showing the first 100."},
    ),
    ("delete_notes", {"success": False, "error": "No such note."}),
    ("echo", {"success": True, "status": "ok", "count": 3}),
    ("echo", {"success": True}),
    ("echo", "plain text without a stop"),
    (
        "echo",
        '{"success": true, "data": "' + "x" * 50 + "\n...[truncated: 900 of 1000 characters cut]",
    ),
    ("echo", [1, 2, 3]),
    ("echo", 7),
]


@pytest.mark.parametrize("result", RESULTS, ids=lambda r: r[0])
def test_every_answer_is_clean_sentences(result):
    text = answer_to(result)
    assert text
    assert ".." not in text
    assert not re.search(r"\.\s+\.", text)
    assert "Done:" not in text
    assert "{" not in text  # no JSON dumps
    assert text.endswith((".", "!", "?", "\u2026"))


def test_answers_over_several_results_stay_clean():
    for pair in itertools.combinations(RESULTS, 2):
        text = answer_to(*pair)
        assert ".." not in text, text
        assert not re.search(r"\.\s+\.", text), text
        assert "\n" not in text  # two results: one paragraph
    text = answer_to(*RESULTS[:4])
    assert text.startswith("Here is what I found:\n\n- ")
    assert len(text.splitlines()) == 6
    assert ".." not in text


def test_the_answers_read_naturally():
    assert answer_to(RESULTS[0]) == "`2**10` = **1024**."
    assert answer_to(RESULTS[2]) == "Could not calculate `1/0`: Division by zero is undefined."
    assert answer_to(RESULTS[6]) == "Noted: call mom."
    assert answer_to(RESULTS[7]) == "Noted: wait\u2026"
    assert answer_to(RESULTS[11]) == "It came back with status ok and count **3**."
    assert answer_to(RESULTS[13]) == "Plain text without a stop."
    assert answer_to(RESULTS[0], RESULTS[4]).startswith("`2**10` = **1024**. It is ")


# --- Paced streaming -------------------------------------------------------------------


def text_request():
    return ChatRequest(
        model="offline", messages=[{"role": "user", "content": "hello"}], tools=TOOLS
    )


def test_text_streams_a_word_at_a_time_at_the_configured_pace():
    delay = 0.01
    started = time.monotonic()
    events = list(OfflineProvider(word_delay_s=delay).stream(text_request()))
    elapsed = time.monotonic() - started
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 10
    assert elapsed >= len(deltas) * delay
    assert events[-1].completion.first_token_ms >= delay * 1000 * 0.9


def test_without_a_delay_nothing_sleeps_or_waits(monkeypatch):
    class NoWaiting(threading.Event):
        def wait(self, timeout=None):
            raise AssertionError("waited")

    def no_sleep(seconds):
        raise AssertionError("slept")

    monkeypatch.setattr(chat.llm.offline.provider.time, "sleep", no_sleep)
    assert complete(OfflineProvider(word_delay_s=0), text_request()).content
    events = list(OfflineProvider(word_delay_s=0).stream(text_request(), stop=NoWaiting()))
    assert isinstance(events[-1], Done)


@pytest.mark.parametrize("delay", [0, 0.01])
def test_a_stop_between_words_ends_the_call(delay):
    stop = threading.Event()
    stream = OfflineProvider(word_delay_s=delay).stream(text_request(), stop=stop)
    assert isinstance(next(stream), TextDelta)
    stop.set()
    with pytest.raises(ProviderStopped):
        next(stream)


def test_get_provider_paces_the_offline_model_by_the_setting(settings):
    settings.LLM_PROVIDER = "offline"
    settings.TOOLCHAT_OFFLINE_WORD_DELAY_MS = 35
    assert get_provider().word_delay_s == pytest.approx(0.035)


def test_get_provider_defaults_to_offline(settings):
    settings.LLM_PROVIDER = "offline"
    assert get_provider().name == "offline"
    settings.LLM_PROVIDER = "openai"
    settings.OPENAI_API_KEY = "sk-test"
    assert get_provider().name == "openai"


# --- Usage -----------------------------------------------------------------------------


def test_tokens_are_words_and_marks_as_the_module_says():
    assert "one token" in chat.llm.offline.provider.__doc__
    assert token_count("Hello, world.") == 4
    assert token_count("`2**10` = **1024**.") == 13
    assert token_count("") == 0


def test_usage_counts_the_answer_and_the_whole_prompt_the_same_way_every_time():
    completion = ask("what is 2**10")
    (call,) = completion.tool_calls
    assert completion.completion_tokens == token_count(call.name) + token_count(call.arguments)
    # The prompt counts the offered tools' schemas, as a real model does.
    assert completion.prompt_tokens == token_count("user what is 2**10") + token_count(
        json.dumps(TOOLS)
    )
    assert ask("what is 2**10").prompt_tokens == completion.prompt_tokens

    answered = complete(OfflineProvider(), text_request())
    assert answered.completion_tokens == token_count(answered.content)


# --- Follow-up suggestions -------------------------------------------------------------


def suggestions_for(history):
    messages = [*history, {"role": "system", "content": SUGGEST_INSTRUCTION}]
    valid(messages)
    request = ChatRequest(
        model="offline", messages=messages, tools=None, response_format=SUGGESTIONS_FORMAT
    )
    completion = complete(OfflineProvider(), request)
    answer = json.loads(completion.content)
    assert set(answer) == {"suggestions"}
    assert 2 <= len(answer["suggestions"]) <= 3
    assert all(isinstance(s, str) and 0 < len(s) <= 60 for s in answer["suggestions"])
    return answer["suggestions"]


def converse(user, history, text):
    """One turn as the engine runs it, with the real demo tools; the history grows."""
    history.append({"role": "user", "content": text})
    provider = OfflineProvider()
    completion = complete(
        provider, ChatRequest(model="offline", messages=list(history), tools=DEMO_TOOLS)
    )
    if completion.tool_calls:
        history.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [c.to_openai() for c in completion.tool_calls],
            }
        )
        for call in completion.tool_calls:
            context = ToolContext(
                user=user,
                conversation_id=uuid.uuid4(),
                run_id=uuid.uuid4(),
                tool_call_id=call.id,
            )
            result = execute_tool(name=call.name, arguments=call.arguments, context=context)
            assert result.status == "succeeded", result.content
            history.append({"role": "tool", "tool_call_id": call.id, "content": result.content})
        instruction = {"role": "system", "content": COMPOSE_INSTRUCTION}
        completion = complete(
            provider, ChatRequest(model="offline", messages=[*history, instruction])
        )
    history.append({"role": "assistant", "content": completion.content})
    valid(history)
    return completion


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "opening",
    [
        "what is 2**10",
        "what time is it in London",
        "note that **the boiler** needs `descaling`: - filter - valve",
        "search my notes for boiler",
        "generate a dataset of 20 rows",
        "what is 2**10 and what time is it in London",
        "hello",
    ],
)
def test_every_suggestion_is_one_the_offline_model_acts_on(user, opening):
    history: list[dict] = []
    converse(user, history, opening)
    for suggestion in suggestions_for(history):
        # Each is asked in a conversation of its own, after the same opening.
        follow = [dict(m) for m in history]
        answer = converse(user, follow, suggestion)
        assert follow[-2]["role"] == "tool", (suggestion, answer.content)


@pytest.mark.django_db(transaction=True)
def test_suggestions_follow_from_what_just_happened(user):
    history: list[dict] = []
    converse(user, history, "what is 2**10")
    assert suggestions_for(history)[:2] == ["Multiply that by 3", "What is 1024 squared?"]
    converse(user, history, "what time is it in Tokyo")
    assert suggestions_for(history)[0] == "What time is it in New York?"
    converse(user, history, "note that **the boiler** needs `descaling`: - filter - valve")
    note = Resource.objects.get()
    assert (note.title, note.data["body"]) == ("the boiler needs descaling", "- filter - valve")
    # record_note offers its own follow-up (shown first); the model does not repeat it.
    assert 'Search my notes for \\"boiler\\"' in history[-2]["content"]
    assert not any(s.startswith("Search my notes") for s in suggestions_for(history))
    converse(user, history, "search my notes for boiler")
    assert suggestions_for(history)[0] == "Note that the boiler was checked today"
    assert suggestions_for([{"role": "user", "content": "hi"}]) == [
        "What is 2**10 and what time is it in London?",
        "Note that the boiler was serviced today",
        "What time is it in Tokyo?",
    ]


# --- The `llm` decider -----------------------------------------------------------------


def decide(messages):
    request = ChatRequest(
        model="offline", messages=messages, tools=TOOLS, response_format=DECISION_FORMAT
    )
    return json.loads(complete(OfflineProvider(), request).content)


def test_structured_decision_for_the_llm_decider():
    assert decide([{"role": "user", "content": "what is 2+3"}]) == {
        "done": False,
        "next_tool": "calculator",
        "arguments": {"expression": "2+3"},
        "final_output": None,
    }


def test_the_decider_runs_several_requests_one_after_the_other():
    messages = [{"role": "user", "content": "what is 2**10 and what time is it in London"}]
    first = decide(messages)
    assert (first["next_tool"], first["arguments"]) == ("calculator", {"expression": "2**10"})
    messages += turn(
        "", "calculator", first["arguments"], calculator(None, expression="2**10"), ""
    )[1:3]
    second = decide(messages)
    assert (second["next_tool"], second["arguments"]) == (
        "get_current_time",
        {"timezone": "Europe/London"},
    )
    time_now = get_current_time(None, timezone="Europe/London")
    messages += turn("x", "get_current_time", second["arguments"], time_now, "")[1:3]
    valid(messages)
    last = decide(messages)
    assert last["done"] is True
    assert last["final_output"] == f"`2**10` = **1024**. {time_now['message']}"


# --- Schemas of MCP servers, destructive tools, ids from the conversation ---------------

# The tools of mcp-server-time as an `mcpServers` entry named "time" offers them
# (the README demo test calls the real server).
TIME_TOOLS = [
    function(
        "time__get_current_time",
        "Get current time in a specific timezones",
        {
            "timezone": {
                "type": "string",
                "description": "IANA timezone name (e.g., 'America/New_York', 'Europe/London'). "
                "Use 'UTC' as local timezone if no timezone provided by the user.",
            }
        },
        ["timezone"],
    ),
    function(
        "time__convert_time",
        "Convert time between timezones",
        {
            "source_timezone": {
                "type": "string",
                "description": "Source IANA timezone name (e.g., 'America/New_York', "
                "'Europe/London'). Use 'UTC' as local timezone if no source timezone "
                "provided by the user.",
            },
            "time": {"type": "string", "description": "Time to convert in 24-hour format (HH:MM)"},
            "target_timezone": {
                "type": "string",
                "description": "Target IANA timezone name (e.g., 'Asia/Tokyo', "
                "'America/San_Francisco'). Use 'UTC' as local timezone if no target timezone "
                "provided by the user.",
            },
        },
        ["source_timezone", "time", "target_timezone"],
    ),
]
DEMO_AND_TIME_TOOLS = DEMO_TOOLS + TIME_TOOLS


@pytest.mark.parametrize(
    ("sentence", "arguments"),
    [
        (
            "Convert 14:00 from Paris to New York",
            {
                "source_timezone": "Europe/Paris",
                "time": "14:00",
                "target_timezone": "America/New_York",
            },
        ),
        (
            "Convert 14:00 from Europe/Paris to America/New_York",
            {
                "source_timezone": "Europe/Paris",
                "time": "14:00",
                "target_timezone": "America/New_York",
            },
        ),
        (
            "convert 2pm to Japan time from France",
            {"source_timezone": "Europe/Paris", "time": "14:00", "target_timezone": "Asia/Tokyo"},
        ),
        (
            "convert 9:05 am in Tokyo to London time",
            {"source_timezone": "Asia/Tokyo", "time": "09:05", "target_timezone": "Europe/London"},
        ),
    ],
)
def test_an_mcp_time_conversion_gets_zones_and_a_clock_time(sentence, arguments):
    assert calls_of(ask(sentence, DEMO_AND_TIME_TOOLS)) == [("time__convert_time", arguments)]


def test_with_mcp_time_tools_offered_the_built_in_time_tool_still_answers():
    assert calls_of(ask("what time is it in Tokyo?", DEMO_AND_TIME_TOOLS)) == [
        ("get_current_time", {"timezone": "Asia/Tokyo"})
    ]
    assert calls_of(ask("what time is it in Japan?", TIME_TOOLS)) == [
        ("time__get_current_time", {"timezone": "Asia/Tokyo"})
    ]


def test_an_enum_value_named_in_the_text_is_chosen():
    tools = [
        function(
            "convert_temperature",
            "Convert a temperature.",
            {
                "value": {"type": "number"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit", "kelvin"]},
            },
            ["value", "unit"],
        )
    ]
    assert calls_of(ask("convert 100 to fahrenheit", tools)) == [
        ("convert_temperature", {"value": 100.0, "unit": "fahrenheit"})
    ]


def note_item(note_id, title):
    return {"id": note_id, "title": title, "body": "", "created_at": "2026-01-01T10:00:00+00:00"}


KETTLE = note_item("n-kettle", "the kettle needs descaling")
BOILER = note_item("n-boiler", "the boiler needs descaling")


def searched(query, notes):
    """A search_notes turn that found these notes."""
    result = {
        "success": True,
        "data": notes,
        "query": query,
        "total_available": len(notes),
        "returned": len(notes),
        "truncated": False,
        "message": f"Found {len(notes)} notes matching {query!r}.",
    }
    return turn(f"search my notes for {query}", "search_notes", {"query": query}, result, "Found.")


def test_delete_them_deletes_the_notes_the_last_search_found():
    history = searched("descaling", [KETTLE, BOILER])
    assert calls_of(follow_up(history, "Delete them", DEMO_TOOLS)) == [
        ("delete_notes", {"note_ids": ["n-kettle", "n-boiler"]})
    ]


def test_delete_the_note_about_a_topic_deletes_only_the_ids_known_for_it():
    history = searched("descaling", [KETTLE, BOILER])
    assert calls_of(follow_up(history, "Delete my note about the kettle", DEMO_TOOLS)) == [
        ("delete_notes", {"note_ids": ["n-kettle"]})
    ]


@pytest.mark.parametrize(
    ("sentence", "query"),
    [
        ("Delete my notes about the kettle", "kettle"),
        ("remove the note about the boiler", "boiler"),
    ],
)
def test_deleting_notes_whose_ids_are_unknown_searches_for_them_first(sentence, query):
    assert calls_of(ask(sentence, DEMO_TOOLS)) == [("search_notes", {"query": query})]


def test_delete_them_with_nothing_found_earlier_deletes_nothing_and_searches_nothing():
    assert calls_of(ask("Delete them", DEMO_TOOLS)) == [("delete_notes", {})]


def test_notes_already_deleted_are_not_deleted_again():
    history = searched("descaling", [KETTLE, BOILER])
    history += turn(
        "delete the kettle note",
        "delete_notes",
        {"note_ids": ["n-kettle"]},
        {"success": True, "data": {"deleted": [{"id": "n-kettle", "title": KETTLE["title"]}]}},
        "Deleted.",
    )
    assert calls_of(follow_up(history, "Delete them", DEMO_TOOLS)) == [
        ("delete_notes", {"note_ids": ["n-boiler"]})
    ]


def test_in_a_loop_the_search_is_followed_by_deleting_what_it_found():
    first = ask("Delete my notes about the kettle", DEMO_TOOLS)
    (call,) = first.tool_calls
    found = {"success": True, "data": [KETTLE], "query": "kettle", "message": "Found 1 note."}
    messages = [
        {"role": "user", "content": "Delete my notes about the kettle"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps(found)},
    ]
    request = ChatRequest(model="offline", messages=messages, tools=DEMO_TOOLS)
    second = complete(OfflineProvider(), request)
    assert calls_of(second) == [("delete_notes", {"note_ids": ["n-kettle"]})]
    deleted = {
        "success": True,
        "data": {"deleted": [{"id": "n-kettle", "title": KETTLE["title"]}]},
        "message": "Deleted 1 note: the kettle needs descaling.",
    }
    (delete,) = second.tool_calls
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": delete.id,
                    "type": "function",
                    "function": {"name": delete.name, "arguments": delete.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": delete.id, "content": json.dumps(deleted)},
    ]
    valid(messages)
    last = complete(
        OfflineProvider(), ChatRequest(model="offline", messages=messages, tools=DEMO_TOOLS)
    )
    assert last.tool_calls == []
    assert "Deleted 1 note: the kettle needs descaling." in last.content


def test_a_tool_that_deletes_is_never_picked_unless_asked():
    history = searched("descaling", [KETTLE, BOILER])
    for text in ("search my notes for the kettle", "list my notes", "what notes do I have"):
        assert "delete_notes" not in [
            c.name for c in follow_up(history, text, DEMO_TOOLS).tool_calls
        ]


def test_a_time_conversion_is_answered_in_words():
    result = {
        "source": {
            "timezone": "Europe/Paris",
            "datetime": "2026-11-25T14:00:00+01:00",
            "day_of_week": "Wednesday",
            "is_dst": False,
        },
        "target": {
            "timezone": "America/New_York",
            "datetime": "2026-11-25T08:00:00-05:00",
            "day_of_week": "Wednesday",
            "is_dst": False,
        },
        "time_difference": "-6.0h",
    }
    arguments = {
        "source_timezone": "Europe/Paris",
        "time": "14:00",
        "target_timezone": "America/New_York",
    }
    history = turn("convert", "time__convert_time", arguments, result, "")[:3]
    answer = complete(OfflineProvider(), ChatRequest(model="offline", messages=history)).content
    assert answer == (
        "14:00 on Wednesday in Europe/Paris is 08:00 on Wednesday in America/New_York (-6.0h)."
    )


def delete_in_a_loop(user, conversation, text):
    """Send `text` in the conversation, approve the delete it waits on; the ended run."""
    run = run_start(conversation=conversation, content=text)
    waiting = ToolExecution.objects.filter(run=run, status=ExecutionStatus.AWAITING_APPROVAL)
    wait_until(lambda: waiting.exists(), timeout=30)
    (execution,) = waiting
    tool_call_decide(execution_id=execution.pk, user=user, approve=True)
    run = wait_for_run(run, 30)
    assert run.status == RunStatus.COMPLETED, run.error
    return run


def record_notes(user, conversation, *titles):
    for title in titles:
        run = wait_for_run(run_start(conversation=conversation, content=f"Note that {title}"), 30)
        assert run.status == RunStatus.COMPLETED, run.error


@pytest.mark.django_db(transaction=True)
def test_in_a_loop_one_message_searches_then_deletes_what_it_found_after_approval(user):
    """Through the engine: the ids are unknown to the conversation, so it searches first."""
    record_notes(
        user,
        ConversationFactory(owner=user),
        "the kettle needs descaling",
        "the kettle lid is loose",
        "the boiler hums",
    )
    run = delete_in_a_loop(
        user, ConversationFactory(owner=user, mode=Mode.LOOP), "Delete my notes about the kettle"
    )
    called = [(e.name, e.arguments) for e in run.tool_executions.order_by("created_at")]
    assert [name for name, _ in called] == ["search_notes", "delete_notes"]
    assert called[0][1] == {"query": "kettle"}
    assert len(called[1][1]["note_ids"]) == 2
    assert list(Resource.objects.filter(owner=user).values_list("title", flat=True)) == [
        "the boiler hums"
    ]
    answer = run_final_message(run=run)
    assert answer is not None
    assert "Deleted 2 notes" in answer.content


@pytest.mark.django_db(transaction=True)
def test_in_a_loop_notes_known_from_the_conversation_are_deleted_without_a_search(user):
    conversation = ConversationFactory(owner=user, mode=Mode.LOOP)
    record_notes(
        user,
        conversation,
        "the kettle needs descaling",
        "the kettle lid is loose",
        "the boiler hums",
    )
    run = delete_in_a_loop(user, conversation, "Delete my notes about the kettle")
    assert [e.name for e in run.tool_executions.all()] == ["delete_notes"]
    assert list(Resource.objects.filter(owner=user).values_list("title", flat=True)) == [
        "the boiler hums"
    ]


def test_the_decider_searches_then_deletes_then_is_done():
    text = "Delete my notes about the kettle"
    messages = [{"role": "user", "content": text}]
    first = decide_with(messages, DEMO_TOOLS)
    assert (first["next_tool"], first["arguments"]) == ("search_notes", {"query": "kettle"})
    found = {"success": True, "data": [KETTLE], "query": "kettle", "message": "Found 1 note."}
    messages += turn("", "search_notes", first["arguments"], found, "")[1:3]
    second = decide_with(messages, DEMO_TOOLS)
    assert (second["next_tool"], second["arguments"]) == (
        "delete_notes",
        {"note_ids": ["n-kettle"]},
    )
    deleted = {
        "success": True,
        "data": {"deleted": [{"id": "n-kettle", "title": KETTLE["title"]}]},
        "message": "Deleted 1 note: the kettle needs descaling.",
    }
    messages += turn("x", "delete_notes", second["arguments"], deleted, "")[1:3]
    valid(messages)
    last = decide_with(messages, DEMO_TOOLS)
    assert last["done"] is True
    assert "Deleted 1 note" in last["final_output"]


def decide_with(messages, tools):
    request = ChatRequest(
        model="offline", messages=messages, tools=tools, response_format=DECISION_FORMAT
    )
    return json.loads(complete(OfflineProvider(), request).content)


def test_a_delete_that_could_only_search_says_how_to_delete_what_it_found():
    found = {
        "success": True,
        "data": [KETTLE],
        "query": "kettle",
        "message": "Found 1 note matching 'kettle'.",
    }
    messages = turn(
        "Delete my notes about the kettle", "search_notes", {"query": "kettle"}, found, ""
    )
    answer = complete(
        OfflineProvider(), ChatRequest(model="offline", messages=messages[:3])
    ).content
    assert answer == "Found 1 note matching 'kettle'. Say \"Delete them\" to delete them."
    # A plain search says nothing of deleting.
    messages = turn("search my notes for kettle", "search_notes", {"query": "kettle"}, found, "")
    answer = complete(
        OfflineProvider(), ChatRequest(model="offline", messages=messages[:3])
    ).content
    assert answer == "Found 1 note matching 'kettle'."


def test_asked_for_code_the_offline_model_answers_with_a_code_block():
    from chat.llm.offline.answers import answer_small_talk
    from chat.markdown import markdown_html

    answer = answer_small_talk("Show me code that calls toolchat", [])
    html = markdown_html(answer)
    assert '<pre><code class="language-python">' in html
    assert "from openai import OpenAI" in html
    assert answer_small_talk("Hello", []).count("```") == 0


@pytest.mark.parametrize(
    "asked",
    [
        "Show me how to call toolchat from Python",
        "How do I use the API?",
        "How can a script talk to you?",
        "Is there an SDK example?",
        "How do I call this programmatically",
    ],
)
def test_asked_how_to_call_it_from_a_program_the_offline_model_shows_the_example(asked):
    """A new user asks for the example in their own words, not only with the word "code"."""
    from chat.llm.offline.answers import answer_small_talk

    assert "from openai import OpenAI" in answer_small_talk(asked, [])


@pytest.mark.parametrize(
    "asked",
    ["What is the capital of Peru?", "Tell me a story", "Give me an example of a TV program"],
)
def test_a_question_about_something_else_gets_no_code_example(asked):
    from chat.llm.offline.answers import answer_small_talk

    assert "```" not in answer_small_talk(asked, [])
