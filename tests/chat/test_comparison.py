"""The answers' diff of a comparison (chat/comparison.py `answer_diff`): by words, whole,
and bounded in cost whatever the answers hold."""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat.comparison import DIFF_MAX_WORDS, answer_diff

# Few words and white space of several kinds, so that texts share words and differ in both.
TEXTS = st.lists(st.sampled_from(["a", "b", "cd", " ", "  ", "\n", "\t", "."]), max_size=40).map(
    "".join
)


def sides(parts: list[dict[str, str]]) -> tuple[str, str]:
    """The two answers the parts make: equal and deleted, equal and inserted."""
    first = "".join(p["text"] for p in parts if p["op"] != "insert")
    second = "".join(p["text"] for p in parts if p["op"] != "delete")
    return first, second


@given(TEXTS, TEXTS)
def test_the_parts_make_both_answers_whole(one, two):
    diff = answer_diff(one, two)

    assert sides(diff.parts) == (one, two)
    assert all(part["text"] for part in diff.parts)
    # Between two equal parts, at most one delete and then one insert.
    ops = "".join(part["op"][0] for part in diff.parts)
    assert "ee" not in ops
    assert "dd" not in ops
    assert "ii" not in ops
    assert "id" not in ops
    assert 0 <= diff.similarity <= 1
    assert diff.limited is False


@given(TEXTS)
def test_an_answer_is_wholly_like_itself(text):
    diff = answer_diff(text, text)
    assert diff.similarity == 1.0
    assert [part["op"] for part in diff.parts] == (["equal"] if text else [])


def test_words_are_compared_and_the_white_space_between_goes_with_what_changed():
    diff = answer_diff("I noted it.", "I noted it, and 6.")

    assert diff.parts == [
        {"op": "equal", "text": "I noted"},
        {"op": "delete", "text": " it."},
        {"op": "insert", "text": " it, and 6."},
    ]
    assert diff.similarity == round(2 * 2 / (3 + 5), 4)
    # Only white space changed: the words are equal, the spaces out and in.
    assert answer_diff("one two", "one\ntwo").parts == [
        {"op": "equal", "text": "one"},
        {"op": "delete", "text": " "},
        {"op": "insert", "text": "\n"},
        {"op": "equal", "text": "two"},
    ]


@pytest.mark.parametrize(
    "vocabulary",
    # Two words in orders of their own: what makes difflib's matcher slowest; then more.
    [["a", "b"], list("abcdefghij"), [f"word{n}" for n in range(4000)]],
    ids=["two words", "ten words", "many words"],
)
def test_long_answers_are_diffed_in_bounded_time_and_say_so(vocabulary):
    one, two = (" ".join(random.Random(seed).choices(vocabulary, k=50_000)) for seed in (1, 2))

    started = time.monotonic()
    diff = answer_diff(one, two)
    elapsed = time.monotonic() - started

    assert elapsed < 3, f"{elapsed:.1f} s"
    assert diff.limited is True
    assert sides(diff.parts) == (one, two)
    assert diff.similarity <= 2 * DIFF_MAX_WORDS / 100_000
