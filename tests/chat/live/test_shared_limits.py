"""Limits that hold across web processes: two uvicorn servers on one Redis and one database.

The per-user socket cap and the message rate are counted in Redis, so a user
cannot multiply them by the number of web processes; a process that dies
without closing its sockets gives their slots back when they lapse.
"""

from __future__ import annotations

import contextlib
import json
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from rest_framework.authtoken.models import Token
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.assertions import wait_until
from tests.factories import ConversationFactory
from tests.plugins.servers import AsgiServer

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

PING_S = 0.5


@pytest.fixture
def servers(celery_env, user):
    env = {
        **celery_env["env"],
        "TOOLCHAT_WS_MAX_SOCKETS_PER_USER": "2",
        "TOOLCHAT_MESSAGE_RATE": "3/min",
        "TOOLCHAT_WS_PING_S": str(PING_S),
    }
    started = []
    for name in ("a", "b"):
        server = AsgiServer(env=env, log_path=celery_env["logs"] / f"uvicorn-{name}.log")
        server.start()
        started.append(server)
    token = Token.objects.create(user=user)
    yield started, {"Authorization": f"Token {token.key}"}
    for server in started:
        server.stop()


def socket_url(server, conversation) -> str:
    return server.base_url.replace("http://", "ws://") + f"/ws/conversations/{conversation.id}/"


def refused_with(server, conversation, headers) -> int | None:
    """The close code of a socket refused after its handshake, or None if it stays open."""
    with connect(socket_url(server, conversation), additional_headers=headers) as socket:
        try:
            socket.recv(timeout=1.5 * PING_S)
        except ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd else -1
        except TimeoutError:
            return None
    return None


def test_the_socket_cap_counts_every_web_process(servers, user):
    (a, b), headers = servers
    conversation = ConversationFactory(owner=user)
    with (
        connect(socket_url(a, conversation), additional_headers=headers),
        connect(socket_url(b, conversation), additional_headers=headers) as second,
    ):
        # Two open, one on each process: a third on either is one too many.
        assert refused_with(a, conversation, headers) == 4429
        assert refused_with(b, conversation, headers) == 4429
        second.close()
        wait_until(
            lambda: refused_with(a, conversation, headers) is None,
            what="the closed socket's slot to be given back",
        )


def test_a_dead_processs_sockets_lapse(servers, user):
    (a, b), headers = servers
    conversation = ConversationFactory(owner=user)
    with contextlib.ExitStack() as held:
        for _ in range(2):
            held.enter_context(connect(socket_url(b, conversation), additional_headers=headers))
        assert refused_with(a, conversation, headers) == 4429
        b.process.kill()  # no close frames, no slots given back
        b.process.wait(10)
        wait_until(
            lambda: refused_with(a, conversation, headers) is None,
            timeout=15,
            what="the dead process's slots to lapse",
        )


def post(server, conversation, headers) -> int:
    request = urllib.request.Request(
        f"{server.base_url}/api/v1/conversations/{conversation.id}/messages/",
        data=json.dumps({"content": "hello"}).encode(),
        headers={**headers, "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_the_message_rate_counts_every_web_process_and_both_paths(servers, user):
    (a, b), headers = servers
    conversations = [ConversationFactory(owner=user) for _ in range(5)]
    assert [post(a, conversations[0], headers), post(b, conversations[1], headers)] == [202, 202]
    with connect(socket_url(a, conversations[2]), additional_headers=headers) as socket:
        socket.send(json.dumps({"type": "message", "content": "hello"}))
        assert json.loads(socket.recv(timeout=10))["type"] == "ack"  # the third of 3/min
        socket.send(json.dumps({"type": "message", "content": "again"}))
        reply = json.loads(socket.recv(timeout=10))
        assert (reply["type"], reply["code"]) == ("error", "throttled")
    assert post(b, conversations[3], headers) == 429
    assert post(a, conversations[4], headers) == 429


def test_posts_at_once_on_both_web_processes_get_the_budget_and_no_more(servers, user):
    (a, b), headers = servers
    conversations = [ConversationFactory(owner=user) for _ in range(8)]
    together = threading.Barrier(len(conversations))

    def post_together(index: int) -> int:
        together.wait()
        return post((a, b)[index % 2], conversations[index], headers)

    with ThreadPoolExecutor(len(conversations)) as pool:
        statuses = sorted(pool.map(post_together, range(len(conversations))))
    assert statuses == [202] * 3 + [429] * 5
