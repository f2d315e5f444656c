"""A run's `RequestHasher` gives every call's `request_hash`, byte for byte.

The hasher keeps the hash's state after a request's messages and goes on from
it when the next request begins with the same message objects; these tests
hold its digests to `request_hash` (the sorted JSON of the whole request)
over the requests a run makes, and over any sequence of requests at all.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from chat.engine.request import RequestHasher, request_hash
from chat.history import HistoryRow, RunHistory
from chat.llm.base import ChatRequest
from tools.registry import registry


def tools() -> list[dict[str, Any]]:
    """The schemas a run offers: the registry's own tools."""
    return registry.openai_tools()


def rows(turns: int) -> list[HistoryRow]:
    """A stored conversation: user, assistant tool call, tool result, answer, per turn."""
    stored = []
    for turn in range(turns):
        call = {
            "id": f"call_{turn}",
            "type": "function",
            "function": {"name": "calculator", "arguments": f'{{"expression": "{turn}*7"}}'},
        }
        stored += [
            HistoryRow(4 * turn, "user", f"what is {turn}*7? (ünïcode, \u2028)", None, ""),
            HistoryRow(4 * turn + 1, "assistant", None, [call], ""),
            HistoryRow(4 * turn + 2, "tool", str(turn * 7), None, f"call_{turn}"),
            HistoryRow(4 * turn + 3, "assistant", f"{turn}*7 = **{turn * 7}**", None, ""),
        ]
    return stored


def test_a_runs_calls_hash_as_request_hash_does():
    history = RunHistory(rows(30), system_prompt="Be brief.")
    history.append(HistoryRow(120, "user", "and 12*7?", None, ""))
    hasher = RequestHasher()
    limits = {"max_messages": 40, "max_chars": None}
    # The tools call, then the compose call after the answer and its tool result.
    tools_call = ChatRequest("m", history.messages(**limits), tools=tools(), tool_choice="auto")
    assert hasher(tools_call) == request_hash(tools_call)
    call = {"id": "c", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}
    history.append(HistoryRow(121, "assistant", None, [call], ""))
    history.append(HistoryRow(122, "tool", "84", None, "c"))
    messages = [*history.messages(**limits), {"role": "system", "content": "Answer now."}]
    compose = ChatRequest("m", messages, temperature=0.2)
    assert messages[:-3] == tools_call.messages  # it goes on from the tools call's state
    assert all(a is b for a, b in zip(messages, tools_call.messages, strict=False))
    assert hasher(compose) == request_hash(compose)
    assert hasher(compose) == request_hash(compose)  # the same request again
    # A loop's next step past the budget: trimming cut the oldest turn, so the
    # request no longer begins with the last one's messages.
    history.append(HistoryRow(123, "assistant", None, [{**call, "id": "d"}], ""))
    history.append(HistoryRow(124, "tool", "85", None, "d"))
    step = ChatRequest("m", history.messages(**limits), tools=tools(), tool_choice="auto")
    assert step.messages[1] is not tools_call.messages[1]
    assert hasher(step) == request_hash(step)


def test_empty_and_tool_choice_shapes_hash_alike():
    hasher = RequestHasher()
    for request in (
        ChatRequest("m", []),
        ChatRequest(
            "m", [], tools=tools(), tool_choice={"type": "function", "function": {"name": "x"}}
        ),
        ChatRequest("m", [{"role": "user", "content": "hi"}]),
        ChatRequest("other", [{"role": "user", "content": "hi"}]),
    ):
        assert hasher(request) == request_hash(request)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
messages_strategy = st.dictionaries(st.text(max_size=6), json_values, max_size=4)


@settings(max_examples=200, deadline=None)
@given(
    pool=st.lists(messages_strategy, min_size=1, max_size=8),
    picks=st.lists(
        st.tuples(
            st.lists(st.integers(min_value=0, max_value=7), max_size=8),
            st.sampled_from(["m", "ü"]),
            st.booleans(),
        ),
        min_size=1,
        max_size=5,
    ),
)
def test_any_sequence_of_requests_hashes_as_request_hash_does(
    pool: list[dict[str, Any]], picks: list[tuple[list[int], str, bool]]
):
    # Requests built from one pool of message objects: they share prefixes, or
    # do not, in any way a sequence can.
    hasher = RequestHasher()
    for indexes, model, offered in picks:
        messages = [pool[index % len(pool)] for index in indexes]
        request = ChatRequest(model, messages, tools=tools() if offered else None)
        assert hasher(request) == request_hash(request)
