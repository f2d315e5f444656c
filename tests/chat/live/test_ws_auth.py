"""The WebSocket while PostgreSQL is down: 503 with Retry-After, as every other door.

Both ways in need the database before the consumer runs (a token's user, a
session's), and then the consumer reads the conversation. A real uvicorn on a
PostgreSQL of the test's own, stopped as a crash stops it: the handshake is
refused the way the API and the pages refuse a request, never a 500. Daphne
cannot answer a handshake with a status of the application's choosing (it has
no `websocket.http.response`), and a socket already open cannot be given one:
both are closed with 4503, "come back later" (Daphne cannot send RFC 6455's 1013).
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.plugins.servers import ROOT, AsgiServer, server_environment
from tests.plugins.services import PostgresServer

pytestmark = pytest.mark.postgres

# A user, their token, a signed-in session and a conversation, made in the private database.
SIGNED_IN = """
import json
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.authtoken.models import Token
from chat.models import Conversation
user = get_user_model().objects.create_user("outage", password="unused-password")
browser = Client()
browser.force_login(user)
print(json.dumps({
    "token": Token.objects.create(user=user).key,
    "session": browser.cookies["sessionid"].value,
    "conversation": str(Conversation.objects.create(owner=user, title="t").pk),
}))
"""


@pytest.fixture(params=["uvicorn"])
def served(request, tmp_path):
    """An ASGI server with production's connection pool on a PostgreSQL of this test's own."""
    database = PostgresServer()
    database.start()
    with psycopg.connect(database.url("postgres"), autocommit=True) as connection:
        connection.execute("CREATE DATABASE toolchat")
    env = {"DATABASE_URL": database.url(), "DATABASE_POOL": "1"}

    def manage(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=server_environment(**env),
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    manage("migrate", "--noinput")
    signed_in = json.loads(manage("shell", "-c", SIGNED_IN).splitlines()[-1])
    # Daphne drops a handshake unanswered after 5 s, before the pool's 10 s wait for a
    # connection ends: docs/deploy.md has it wait longer.
    args = ("--websocket_connect_timeout", "30") if request.param == "daphne" else ()
    web = AsgiServer(env=env, log_path=tmp_path / "server.log", server=request.param, args=args)
    web.start()
    yield web, database, signed_in
    web.stop()
    database.stop()


def test_the_handshake_is_a_503_with_retry_after_while_the_database_is_down(served):
    web, database, signed_in = served
    url = f"ws://127.0.0.1:{web.port}/ws/conversations/{signed_in['conversation']}/"
    ways_in = {
        "token": {"Authorization": f"Token {signed_in['token']}"},
        "session": {
            "Cookie": f"sessionid={signed_in['session']}",
            "Origin": f"http://127.0.0.1:{web.port}",
        },
    }
    # Up, both ways in open the socket.
    for headers in ways_in.values():
        with connect(url, additional_headers=headers) as socket:
            socket.send(json.dumps({"type": "resume", "after": 0}))

    database.halt()

    def handshake(headers: dict[str, str]) -> InvalidStatus:
        with pytest.raises(InvalidStatus) as refused:
            connect(url, additional_headers=headers, open_timeout=30)
        return refused.value

    with ThreadPoolExecutor(len(ways_in)) as pool:
        refusals = dict(zip(ways_in, pool.map(handshake, ways_in.values()), strict=True))
    for way, refusal in refusals.items():
        response = refusal.response
        assert response.status_code == 503, (way, response.status_code, web.log())
        assert int(response.headers["Retry-After"]) > 0, way
        body = json.loads(response.body)
        assert body["code"] == "unavailable", body
        assert "database" in body["message"], body
    assert "Traceback" not in web.log(), web.log()


def _close_code(socket) -> int | None:
    """The close code the server ends `socket` with (what it sends before is read and dropped)."""
    try:
        while True:
            socket.recv(timeout=30)
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd else None


@pytest.mark.parametrize(
    "frame", [{"type": "resume", "after": 0}, {"type": "message", "content": "hi"}]
)
def test_an_open_socket_that_meets_the_outage_is_told_to_come_back(served, frame):
    web, database, signed_in = served
    url = f"ws://127.0.0.1:{web.port}/ws/conversations/{signed_in['conversation']}/"
    with connect(
        url, additional_headers={"Authorization": f"Token {signed_in['token']}"}
    ) as socket:
        database.halt()
        socket.send(json.dumps(frame))
        assert _close_code(socket) == 4503, web.log()
    assert "Traceback" not in web.log(), web.log()


@pytest.mark.parametrize("served", ["daphne"], indirect=True)
def test_a_server_without_the_denial_response_closes_the_handshake_with_4503(served):
    web, database, signed_in = served
    url = f"ws://127.0.0.1:{web.port}/ws/conversations/{signed_in['conversation']}/"
    database.halt()
    token = {"Authorization": f"Token {signed_in['token']}"}
    with connect(url, additional_headers=token, open_timeout=30) as socket:
        assert _close_code(socket) == 4503, web.log()
    assert "Traceback" not in web.log(), web.log()
