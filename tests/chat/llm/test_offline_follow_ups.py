"""The offline model's follow-ups and its code example, as a new user meets them.

Follow-up chips never offer what was just asked (or asked before in the
conversation), and the README's first question is not after every answer.
The code example names no address it cannot know: run as written against a
real server on a port of its own, it gets its answer.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from chat.engine.suggestions import suggestions_clean, tool_suggestions
from chat.llm.base import ChatRequest
from chat.llm.offline import OfflineProvider
from chat.llm.offline.answers import answer_small_talk
from chat.llm.offline.suggestions import DEFAULTS, suggestions_make
from tests.factories import UserFactory

README_FIRST = DEFAULTS[0][0]  # "What is 2**10 and what time is it in London?"


def calculated(question: str, result: int) -> list[dict]:
    return [
        {"role": "user", "content": question},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "2**10"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"result": result})},
        {"role": "assistant", "content": f"It is {result}."},
    ]


def test_the_question_just_asked_is_not_offered_again():
    # Asked word for word (but for case, spaces and the question mark).
    history = [
        {"role": "user", "content": "  what is 2**10 and what time is it in   london "},
        {"role": "assistant", "content": "I am the offline model."},
    ]
    offered = suggestions_make(history)
    assert README_FIRST not in offered
    assert 2 <= len(offered) <= 3


def test_the_readme_question_is_not_offered_after_every_answer():
    offered = suggestions_make(calculated("what is 2**10", 1024))
    assert offered == ["Multiply that by 3", "What is 1024 squared?"]
    # After a time, the other tools' prompts come before the README's.
    history = [
        {"role": "user", "content": "what time is it in Tokyo"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {
                        "name": "get_current_time",
                        "arguments": '{"timezone": "Asia/Tokyo"}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": json.dumps({"timezone": "Asia/Tokyo"})},
        {"role": "assistant", "content": "It is 10:00 in Tokyo."},
    ]
    offered = suggestions_make(history)
    assert README_FIRST not in offered
    assert offered[0] == "What time is it in New York?"
    assert len(offered) == 2


def test_a_question_asked_earlier_in_the_conversation_is_not_offered():
    history = [
        *calculated("What is 1024 squared?", 1048576),
        *calculated("what is 2**10", 1024),
    ]
    assert "What is 1024 squared?" not in suggestions_make(history)


def test_a_suggestion_a_question_already_began_with_is_not_offered():
    # "What time is it in Tokyo? Then add 2+2." asked it, with more besides.
    history = [
        {"role": "user", "content": "What time is it in Tokyo? Then add 2+2."},
        {"role": "assistant", "content": "It is 20:21 in Tokyo, and 2+2 = 4."},
        {"role": "user", "content": "hello"},
    ]
    offered = suggestions_make(history)
    assert offered
    assert "What time is it in Tokyo?" not in offered


def test_the_engine_drops_suggestions_equal_to_a_question_asked():
    asked = ["What is 2**10 and what time is it in London?", "note the boiler"]
    kept = suggestions_clean(
        ["what is 2**10 and  what time is it in london", "Note the boiler.", "Search my notes"],
        asked=asked,
    )
    assert kept == ["Search my notes"]
    # A tool's own suggestions too: the user asked it before this turn.
    messages = [
        {"role": "user", "content": "search my notes for boiler"},
        {"role": "assistant", "content": "Found none."},
        {"role": "user", "content": "note the boiler"},
        {"role": "tool", "tool_call_id": "x", "content": json.dumps({"suggestions": asked})},
    ]
    assert tool_suggestions(messages) == [asked[0]]


def test_two_offline_providers_answer_under_their_own_names():
    request = ChatRequest(model="offline", messages=[{"role": "user", "content": "hello"}])
    from chat.llm.base import Done

    def answered(provider: OfflineProvider) -> str:
        (done,) = [e for e in provider.stream(request) if isinstance(e, Done)]
        return done.completion.model

    assert answered(OfflineProvider()) == "offline"
    assert answered(OfflineProvider(name="second")) == "second/offline"


def test_the_code_example_claims_no_address():
    answer = answer_small_talk("show me a code example", [], model_id="second/offline")
    assert not re.search(r":\d{2,5}\b", answer), answer  # no port it cannot know
    assert "127.0.0.1" not in answer
    assert "localhost" not in answer
    assert 'model="second/offline"' in answer


@pytest.mark.postgres
def test_the_code_example_runs_as_written_against_the_app(asgi_server: str):
    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=UserFactory(username="coder"))
    answer = answer_small_talk("show me a code example", [])
    code = re.search(r"```python\n(.*?)```", answer, re.DOTALL)
    assert code is not None
    run = subprocess.run(
        [sys.executable, "-c", code.group(1)],
        env={**os.environ, "TOOLCHAT_URL": asgi_server + "/", "TOOLCHAT_TOKEN": token.key},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "84" in run.stdout


def test_two_offline_providers_are_told_apart_in_the_model_list(settings, tmp_path):
    from chat.llm.endpoints import model_choices

    providers = tmp_path / "providers.json"
    providers.write_text(
        json.dumps(
            {
                "providers": {
                    "offline": {"type": "offline", "label": "Offline demo"},
                    "second": {
                        "type": "offline",
                        "label": "Second offline, no longer offered soon",
                    },
                    "third": {"type": "offline"},
                }
            }
        )
    )
    settings.TOOLCHAT_PROVIDERS = str(providers)
    settings.LLM_MODEL = "offline/offline"
    assert [(c.id, c.label) for c in model_choices()] == [
        ("offline/offline", "Offline demo"),
        ("second/offline", "Second offline, no longer offered soon"),
        ("third/offline", "Offline demo model · third"),
    ]
