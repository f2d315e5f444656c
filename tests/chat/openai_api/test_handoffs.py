"""What a /v1/chat/completions request hands to its thread, through the real ASGI application.

Every `sync_to_async` costs the event loop a few hundred microseconds of CPU
under load (docs/gateway.md, round fifteen): the answer's reads and
writes after the wait go in one hand-off, the wait itself reads nothing when every
run end reaches the process (chat/live/run_wait.py), and a stream's first catch-up reads
whether the run had ended and its events in one. Django's middleware hands
nothing off for a /v1 request (project/handler.py).
"""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token

from chat.models import Conversation, Run, RunStatus
from tests.chat.api.test_async_views import DJANGOS, post
from tests.factories import UserFactory
from tests.llm_server import error_reply, text_reply

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/v1/chat/completions"
MODEL = "openai/test-model"


@pytest.fixture(autouse=True)
def _no_quiet_spell(monkeypatch):
    # A wait reads the run after each quiet spell (a slow first turn would): not here.
    monkeypatch.setattr("chat.live.streams.CATCH_UP_S", 30)


def ours(handoffs: list[str]) -> list[str]:
    """Toolchat's hand-offs (not Django's, nor its log of a 5xx)."""
    return [c for c in handoffs if not c.startswith((*DJANGOS, "log_response"))]


def djangos(handoffs: list[str]) -> list[str]:
    """Django's hand-offs: its middleware's hooks, its request signals, the response's close."""
    return [c for c in handoffs if c.startswith(DJANGOS)]


def test_an_answer_not_streamed_hands_off_twice_and_is_remembered(handoffs, llm_server):
    llm_server.push(text_reply("Four."), text_reply("Five."))
    token = Token.objects.create(user=UserFactory()).key
    asked = [{"role": "user", "content": "2+2?"}]
    answer = post(URL, token, {"model": MODEL, "messages": asked})
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "Four."
    # The request read, checked and its turn started; the outcome read and what the client
    # was sent remembered. The wait reads nothing: it began before the run was dispatched,
    # in the process every end is told to (before, a third hand-off read the run first).
    assert ours(handoffs) == ["AsyncApiView._initial_then", "_answered"]
    # No middleware's hook (project/handler.py's /v1 chain): of Django's own, only the
    # request signal and the response's close are left (there were eight more).
    assert djangos(handoffs) == ["Signal.asend.<locals>.sync_send", "HttpResponseBase.close"]
    # Remembered: the follow-up that sends the answer back continues the conversation.
    follow = [*asked, {"role": "assistant", "content": "Four."}, {"role": "user", "content": "+1?"}]
    again = post(URL, token, {"model": MODEL, "messages": follow})
    assert again.status_code == 200, again.text
    assert (
        again.headers["X-Toolchat-Conversation-Id"] == answer.headers["X-Toolchat-Conversation-Id"]
    )
    assert Conversation.objects.count() == 1


def test_a_failed_answer_not_streamed_is_remembered_for_its_retry(handoffs, llm_server, settings):
    settings.LLM_MAX_RETRIES = 0
    llm_server.push(error_reply(400, "context too long"))
    token = Token.objects.create(user=UserFactory()).key
    asked = [{"role": "user", "content": "2+2?"}]
    answer = post(URL, token, {"model": MODEL, "messages": asked})
    run = Run.objects.get(pk=answer.headers["X-Toolchat-Run-Id"])
    assert run.status == RunStatus.FAILED, answer.text
    assert answer.status_code == 502, answer.text
    assert ours(handoffs) == ["AsyncApiView._initial_then", "_answered"]
    llm_server.push(text_reply("Four."))
    retried = post(URL, token, {"model": MODEL, "messages": asked})
    assert retried.status_code == 200, retried.text
    assert retried.json()["choices"][0]["message"]["content"] == "Four."
    # The failed turn is answered again in its conversation, not in a second one.
    assert (
        retried.headers["X-Toolchat-Conversation-Id"]
        == answer.headers["X-Toolchat-Conversation-Id"]
    )
    assert Conversation.objects.count() == 1


def test_a_stream_reads_the_runs_end_and_its_events_in_one_hand_off(handoffs, llm_server):
    llm_server.push(text_reply("Four."))
    token = Token.objects.create(user=UserFactory()).key
    asked = [{"role": "user", "content": "2+2?"}]
    answer = post(URL, token, {"model": MODEL, "messages": asked, "stream": True})
    assert answer.status_code == 200, answer.text
    assert '"content":"Four."' in answer.text.replace(" ", ""), answer.text
    assert answer.text.rstrip().endswith("data: [DONE]")
    # The turn started; the stream's catch-up (whether the run had ended, and its stored
    # events); at the end, the outcome, its text not yet sent and what the client saw, in one
    # (before: two, the outcome and what was seen).
    called = ours(handoffs)
    assert called == ["AsyncApiView._initial_then", "_ended_then_stored", "_stream_ended"], called
    assert djangos(handoffs) == ["Signal.asend.<locals>.sync_send", "HttpResponseBase.close"]


def test_a_response_not_streamed_hands_off_twice_and_is_remembered(handoffs, llm_server):
    llm_server.push(text_reply("Four."), text_reply("Five."))
    token = Token.objects.create(user=UserFactory()).key
    answer = post("/v1/responses", token, {"model": MODEL, "input": "2+2?"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["output"][0]["content"][0]["text"] == "Four."
    # The request read and its turn started; the outcome, the response and what its client
    # saw in one (before: the wait's read of the run, then three hand-offs after it).
    assert ours(handoffs) == ["AsyncApiView._initial_then", "_responded"]
    response_remembered(token)


def test_a_response_streamed_hands_off_four_times_and_is_remembered(handoffs, llm_server):
    llm_server.push(text_reply("Four."), text_reply("Five."))
    token = Token.objects.create(user=UserFactory()).key
    answer = post("/v1/responses", token, {"model": MODEL, "input": "2+2?", "stream": True})
    assert answer.status_code == 200, answer.text
    assert '"delta":"Four."' in answer.text.replace(" ", ""), answer.text
    assert "event: response.completed" in answer.text
    # The turn started; the resource it opens with, the client's tools and the calls decided
    # before, in one; the catch-up; the outcome, the resource it ends with and what its client
    # saw, in one. Before: nine (three to open, four to close, the resource read twice).
    called = ours(handoffs)
    assert called == ["AsyncApiView._initial_then", "_opened", "_ended_then_stored", "_closed"]
    response_remembered(token)


def response_remembered(token: str) -> None:
    """The follow-up that sends the answer back continues the response's conversation."""
    follow = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "Four."},
        {"role": "user", "content": "+1?"},
    ]
    again = post("/v1/responses", token, {"model": MODEL, "input": follow})
    assert again.status_code == 200, again.text
    assert Conversation.objects.count() == 1
