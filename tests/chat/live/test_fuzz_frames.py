"""Hypothesis against the WebSocket on a real uvicorn: any frame gets an answer, none a dropped socket.

Frames are generated JSON (the five client message types with values of every
shape, NUL and lone surrogates included, nested deep) and raw text. After each
one a known frame follows; its `unknown_type` error must come back on the same
socket, so a frame that crashed the consumer, or made the server unable to
send its answer, fails the test. Frames that post a message start runs (the
offline model answers them), then meet the active run's 409 and the rate limit.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from chat.models import Run
from tests.factories import ConversationFactory

pytestmark = pytest.mark.postgres

EXAMPLES = 300
SENTINEL = '{"type": "fuzz-sentinel"}'

HOSTILE = st.sampled_from(["\x00", "\ud800", "\udfff", "\u200b", "\ufeff", "\U0001d4b3", "\n"])
TEXT = st.one_of(
    st.text(max_size=40),
    st.lists(st.one_of(HOSTILE, st.text(max_size=5)), max_size=8).map("".join),
    st.uuids().map(str),
)
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats()
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)
KEYS = st.sampled_from(["type", "content", "after", "run_id", "execution_id", "reason"])
TYPES = st.sampled_from(["resume", "message", "cancel", "approve", "reject"]) | TEXT


def _encoded(value: object) -> str:
    # ensure_ascii: a lone surrogate travels as its JSON escape (a frame must be UTF-8).
    return json.dumps(value, allow_nan=True)


MESSAGES = st.builds(
    lambda kind, rest: _encoded({"type": kind, **rest}),
    TYPES,
    st.dictionaries(KEYS, VALUES, max_size=4),
)
DEEP = st.integers(min_value=1, max_value=200_000).map(lambda n: "[" * n + "]" * n)
RAW = st.text(max_size=200).filter(lambda text: text != SENTINEL)
FRAMES = st.one_of(MESSAGES, MESSAGES, VALUES.map(_encoded), DEEP, RAW)


@pytest.fixture
def socket(asgi_server, user):
    token = Token.objects.create(user=user)
    conversation = ConversationFactory(owner=user)
    url = asgi_server.replace("http://", "ws://") + f"/ws/conversations/{conversation.id}/"
    with connect(
        url + "?after=0",
        additional_headers={"Authorization": f"Token {token.key}"},
        max_size=None,
    ) as socket:
        yield socket, conversation


def _answered(socket) -> list[dict]:
    """Read until the sentinel's error; everything that came before it."""
    replies = []
    while True:
        reply = json.loads(socket.recv(timeout=30))
        if reply.get("type") == "error" and "fuzz-sentinel" in reply.get("message", ""):
            return replies
        replies.append(reply)


def test_any_frame_gets_an_answer_on_a_socket_that_stays_open(socket):
    connection, conversation = socket
    sent = 0

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(frame=FRAMES)
    def check(frame):
        nonlocal sent
        try:
            connection.send(frame)
            connection.send(SENTINEL)
            replies = _answered(connection)
        except ConnectionClosed as closed:
            raise AssertionError(f"the socket was closed after {frame[:80]!r}: {closed}") from None
        for reply in replies:
            assert reply.get("type") in {"error", "ack", "ping"} or "seq" in reply, reply
            if reply.get("type") == "error":
                assert reply["code"] != "server_error", (frame[:80], reply)
        sent += 1

    check()
    assert sent >= EXAMPLES
    # What was posted was stored as runs of this conversation, and none is stuck.
    assert all(
        run.status in {"completed", "failed", "queued", "running"}
        for run in Run.objects.filter(conversation=conversation)
    )
