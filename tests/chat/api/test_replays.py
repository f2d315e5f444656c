"""Comparing two runs through the API: what a long answer costs, and the rate it may be asked at.

The comparison's content is tested against replays made by the engine in
tests/chat/engine/test_replay.py; here the runs are stored as the engine
stores them, with answers long enough to matter.
"""

from __future__ import annotations

import random
import time

import pytest
from rest_framework.throttling import ScopedRateThrottle

from chat.comparison import DIFF_MAX_WORDS
from tests.chat.api.conftest import stored_turn
from tests.factories import ConversationFactory, finished_run

pytestmark = pytest.mark.django_db


def long_answer(words: int, *, changed: range = range(0)) -> str:
    """Text of `words` words as a model writes it (common words and rare ones, sentences,
    paragraphs), the same each time but for the words at `changed`."""
    rng = random.Random(5)
    common = [
        "the",
        "a",
        "of",
        "to",
        "and",
        "in",
        "is",
        "it",
        "that",
        "for",
        "on",
        "with",
        "as",
        "was",
        "be",
        "by",
        "this",
        "are",
        "or",
        "at",
    ]
    out = []
    for index in range(words):
        word = rng.choice(common) if rng.random() < 0.4 else f"term{rng.randrange(5000)}"
        out.append("changed" if index in changed else word)
        out.append("." if index % 15 == 14 else "")
        out.append("\n\n" if index % 120 == 119 else " ")
    return "".join(out).rstrip()


def test_a_comparison_of_long_answers_is_quick_and_says_what_it_diffed(api, user):
    answer = long_answer(50_000)
    edited = long_answer(50_000, changed=range(250, 50_000, 500))
    original = stored_turn(ConversationFactory(owner=user), answer=answer)
    replica = finished_run(ConversationFactory(owner=user), answer=edited, replay_of=original)

    started = time.monotonic()
    response = api.get(f"/api/v1/runs/{original.pk}/compare/?with={replica.pk}")
    elapsed = time.monotonic() - started

    assert response.status_code == 200, response.json()
    assert elapsed < 5, f"{elapsed:.1f} s"
    body = response.json()
    assert body["answer_diff_limited"] is True
    diff = body["answer_diff"]
    # Each answer is whole in the diff, white space included.
    assert "".join(p["text"] for p in diff if p["op"] != "insert") == answer
    assert "".join(p["text"] for p in diff if p["op"] != "delete") == edited
    # The differing part is diffed word by word from its start: one word out, one in.
    assert [p["op"] for p in diff[:4]] == ["equal", "delete", "insert", "equal"]
    assert len(diff[0]["text"].split()) == 250
    assert diff[2]["text"].split() == ["changed"]
    # Past DIFF_MAX_WORDS words of it, the rest goes out and in whole, and counts as
    # different (the similarity is a lower bound); the common end is equal again.
    whole = max(diff, key=lambda p: len(p["text"]))
    assert whole["op"] in {"delete", "insert"}
    assert len(whole["text"].split()) > 40_000
    assert diff[-1]["op"] == "equal"
    assert 0 < body["answer_similarity"] < (DIFF_MAX_WORDS + 500) / 50_000


def test_a_comparison_of_short_answers_is_whole(api, user):
    original = stored_turn(ConversationFactory(owner=user), answer="Twelve times seven is 84.")
    replica = finished_run(
        ConversationFactory(owner=user), answer="Seven twelves make  84.", replay_of=original
    )

    body = api.get(f"/api/v1/runs/{original.pk}/compare/?with={replica.pk}").json()

    assert body["answer_diff_limited"] is False
    # Words are compared, and the white space between them goes with what changed.
    assert body["answer_diff"] == [
        {"op": "delete", "text": "Twelve times seven is "},
        {"op": "insert", "text": "Seven twelves make  "},
        {"op": "equal", "text": "84."},
    ]
    assert body["answer_similarity"] == round(2 * 1 / (5 + 4), 4)


def test_comparisons_are_rate_limited_apart_from_messages(api, user, monkeypatch):
    monkeypatch.setattr(
        ScopedRateThrottle, "THROTTLE_RATES", {"messages": "1/min", "compare": "2/min"}
    )
    original = stored_turn(ConversationFactory(owner=user))
    replica = finished_run(ConversationFactory(owner=user), replay_of=original)
    url = f"/api/v1/runs/{original.pk}/compare/?with={replica.pk}"

    answers = [api.get(url) for _ in range(3)]

    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[2].json()["code"] == "throttled"
    assert answers[2].json()["details"]["retry_after"] > 0
    # Its budget is its own: a message may still be posted.
    posted = api.post(
        f"/api/v1/conversations/{original.conversation_id}/messages/",
        {"content": "hello"},
        format="json",
    )
    assert posted.status_code == 202
