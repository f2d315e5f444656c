"""A PostgreSQL outage while turns are in flight, on a real worker, a real uvicorn and a real PostgreSQL.

The stack (a Celery worker with the recovery sweep, and uvicorn with the
connection pool production runs) uses a PostgreSQL server of this test's
own, so that stopping it harms no other test; the test drives it from
outside, over HTTP with a token, as a user would. PostgreSQL is stopped as a
crash would stop it (`pg_ctl stop -m immediate`) while the turns' tools run,
kept down for ten seconds, and started again on the same port: the API
says it is unavailable meanwhile, and afterwards every run completes with
each tool run once.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from email.message import Message
from typing import Any

import psycopg
import pytest

from tests.assertions import assert_valid_history, wait_until
from tests.llm_server import Reply, text_reply, tool_calls_reply
from tests.plugins.servers import ROOT, AsgiServer, server_environment
from tests.plugins.services import PostgresServer

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

DOWN_S = 10
# The web process waits for a pooled connection this long (DATABASE_POOL's timeout), then answers.
POOL_TIMEOUT_S = 10
ENDED = {"completed", "failed", "cancelled"}
# The user the test signs in as, made in the private database.
USER_CREATE = """
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
user = get_user_model().objects.create_user("outage", password="unused-password")
print(Token.objects.create(user=user).key)
"""


@pytest.fixture
def database():
    """A PostgreSQL server of this test's own; `crash_safe`, so a crash loses no commit."""
    server = PostgresServer(crash_safe=True)
    server.start()
    with psycopg.connect(server.url("postgres"), autocommit=True) as connection:
        connection.execute("CREATE DATABASE toolchat")
    yield server
    server.stop()


class Client:
    """The API over HTTP, as a user with a token sees it."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url
        self.token = token

    def __call__(
        self, method: str, path: str, body: Any = None, *, page: bool = False
    ) -> tuple[int, Message, Any]:
        """(status, headers, the JSON body, or the text of any other).

        With `page`, as a browser asks for a page: HTML, with a session cookie.
        """
        headers = {"Authorization": f"Token {self.token}", "Accept": "application/json"}
        if page:
            headers = {"Accept": "text/html", "Cookie": "sessionid=a-signed-in-browser"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(
            f"{self.base_url}{path}", data=data, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=POOL_TIMEOUT_S + 20) as response:
                status, raw, answered = response.status, response.read(), response.headers
        except urllib.error.HTTPError as error:
            status, raw, answered = error.code, error.read(), error.headers
        if (answered.get("Content-Type") or "").startswith("application/json"):
            return status, answered, json.loads(raw)
        return status, answered, raw.decode(errors="replace")[:5000]

    def post(self, conversation: str, content: str) -> str:
        """Post a message; the id of its run."""
        status, _, posted = self(
            "POST", f"/api/v1/conversations/{conversation}/messages/", {"content": content}
        )
        assert status == 202, (status, posted)
        return posted["run"]["id"]

    def run_ended(self, run_id: str) -> dict[str, Any] | None:
        """The run, once it has ended."""
        status, _, run = self("GET", f"/api/v1/runs/{run_id}/")
        return run if status == 200 and run["status"] in ENDED else None


@pytest.fixture
def stack(database, celery_env, start_worker, tmp_path):
    """A worker with the sweep, and uvicorn, on the private database; a user's client."""
    env = celery_env["env"]
    env["DATABASE_URL"] = database.url()
    env["TOOLCHAT_RECOVER_S"] = "1"  # the sweep (compose's `beat`), once a second
    # As in production (the test settings turn it off): after the restart, nobody is
    # presumed dead for a while, here a little longer than a stale lease's 2 s.
    env["TOOLCHAT_RESTART_GRACE_S"] = "3"

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
    token = manage("shell", "-c", USER_CREATE).split()[-1]
    # The worker connects for each query (DATABASE_POOL=0), so it meets the outage at
    # once, with the tools' results in hand; the web process runs production's pool.
    worker = start_worker("w1", options=("-B", "--schedule", str(tmp_path / "beat")))
    web = AsgiServer(env={**env, "DATABASE_POOL": "1"}, log_path=tmp_path / "uvicorn.log")
    web.start()
    yield Client(web.base_url, token), worker, web
    web.stop()


def answer(body) -> Reply:
    """For "<tool> <label> [seconds]", call that tool (3 s long by default); answer once its result is in."""
    messages = body["messages"]
    asked = max(i for i, m in enumerate(messages) if m["role"] == "user")
    results = [m for m in messages[asked:] if m["role"] == "tool"]
    if results:
        return text_reply(f"Done: {results[-1]['content']}")
    tool, label, seconds = re.fullmatch(r"(\w+) (\w+) ?(\d*)", messages[asked]["content"]).groups()
    arguments = json.dumps({"label": label, "seconds": int(seconds or 3)})
    return tool_calls_reply([(tool, arguments, f"call_{label}")])


def test_a_postgres_outage_answers_503_and_every_run_completes_afterwards(
    llm_server, celery_env, database, stack
):
    llm_server.responder = answer
    client, worker, web = stack
    conversations = []
    for _ in range(4):
        status, _, created = client("POST", "/api/v1/conversations/", {"title": "outage"})
        assert status == 201, created
        conversations.append(created["id"])
    # In flight when PostgreSQL dies: two tools that end while it is down (one must
    # never run twice), and one that ends after it is back, its worker alive throughout.
    tools = ["slow_step r0", "slow_side_effect r1", f"slow_step r2 {DOWN_S + 5}"]
    runs = [client.post(c, tool) for c, tool in zip(conversations, tools, strict=False)]
    ledger = celery_env["ledger"]
    wait_until(lambda: ledger.read_text().count("start") == 3, timeout=30, what="the tools to run")

    database.halt()
    down_at = time.monotonic()
    probes = {
        "post": (
            "POST",
            f"/api/v1/conversations/{conversations[3]}/messages/",
            {"content": "slow_step r3"},
        ),
        "read": ("GET", f"/api/v1/conversations/{conversations[0]}/messages/", None),
        "readyz": ("GET", "/readyz/", None),
        "healthz": ("GET", "/healthz/", None),
        "page": ("GET", "/", None),
        "admin": ("GET", "/admin/", None),
    }

    def probe(name: str) -> tuple[int, Message, Any, float]:
        started = time.monotonic()
        page = name in ("page", "admin")
        return (*client(*probes[name], page=page), time.monotonic() - started)

    with ThreadPoolExecutor(len(probes)) as pool:
        during = dict(zip(probes, pool.map(probe, probes), strict=True))
    time.sleep(max(0.0, DOWN_S - (time.monotonic() - down_at)))
    assert worker.process.poll() is None, worker.log()[-3000:]
    database.resume()
    up_at = time.monotonic()

    # While it was down: a clear, quick answer, in the API's error shape.
    for name in ("post", "read"):
        status, headers, body, seconds = during[name]
        assert (status, type(body)) == (503, dict), during[name]
        assert body["code"] == "unavailable", body
        assert "database" in body["message"], body
        assert int(headers["Retry-After"]) > 0, headers
        assert seconds < POOL_TIMEOUT_S + 3, during[name]
    status, _, body, seconds = during["readyz"]
    assert (status, body["checks"]["database"]["ok"]) == (503, False), during["readyz"]
    status, _, body, seconds = during["healthz"]
    assert (status, type(body)) == (503, dict), during["healthz"]
    assert body["status"] == "unavailable", body
    # A browser's page (its session is in the database) says the same, in a page.
    for name in ("page", "admin"):
        status, headers, body, seconds = during[name]
        assert status == 503, during[name]
        assert headers["Content-Type"].startswith("text/html"), headers
        assert "database is unavailable" in body, body
        assert int(headers["Retry-After"]) > 0, headers

    # Ready again at once (the pool's reconnection does not back off for long), and
    # from then on every request is served.
    wait_until(lambda: client("GET", "/readyz/")[0] == 200, timeout=15, what="readyz to be 200")
    assert time.monotonic() - up_at < 3, f"ready {time.monotonic() - up_at:.1f} s after PostgreSQL"

    def roles(conversation: str) -> list[str]:
        status, _, page = client("GET", f"/api/v1/conversations/{conversation}/messages/")
        assert status == 200, page
        return [message["role"] for message in page["results"]]

    assert roles(conversations[3]) == []  # the post it refused left nothing behind

    wait_until(lambda: all(map(client.run_ended, runs)), timeout=60, what="every run to end")
    for run_id, conversation in zip(runs, conversations, strict=False):
        run = client.run_ended(run_id)
        assert run["status"] == "completed", (run["status"], run["error"], worker.log()[-3000:])
        assert [e["status"] for e in run["tool_executions"]] == ["succeeded"], run
        assert roles(conversation) == ["user", "assistant", "tool", "assistant"]
    # Every tool ran once: the ones whose result came while the database was down,
    # and the one still running when it came back.
    ran = sorted(ledger.read_text().splitlines())
    assert ran == sorted(f"{event} r{i}" for i in range(3) for event in ("end", "start")), ran

    # A turn in every conversation afterwards completes, with a history any API takes.
    llm_server.requests.clear()
    after = [client.post(c, f"slow_step a{i}") for i, c in enumerate(conversations)]
    wait_until(lambda: all(map(client.run_ended, after)), timeout=60, what="the turns after")
    assert [client.run_ended(r)["status"] for r in after] == ["completed"] * 4
    assert not llm_server.rejected, llm_server.rejected
    for i in range(4):
        sent = [b for b in llm_server.requests if f'"slow_step a{i}"' in json.dumps(b)]
        assert_valid_history(sent[-1]["messages"])
    assert ledger.read_text().count("start") == 3 + 4, ledger.read_text()
    assert worker.process.poll() is None, worker.log()[-3000:]
    assert web.process is not None
    assert web.process.poll() is None, web.log()
    assert "failed with an internal error" not in worker.log()


STORY = " ".join(f"word{n}" for n in range(12))


def test_a_model_answer_that_streams_while_the_database_is_down_is_stored_once_it_is_back(
    llm_server, celery_env, database, stack
):
    """The answer streamed during the outage waits in the worker's memory, as a tool's
    result does, and is stored when the database is back: the model is not asked again
    (a second answer could differ from what the user watched stream, and costs twice)."""
    asked = []

    def story(body: dict[str, Any]) -> Reply:
        asked.append(body)
        # Half a second a word: the stream outlasts the halt below and ends while it is down.
        return text_reply(STORY, chunk_delay_s=0.5)

    llm_server.responder = story
    client, worker, _ = stack
    status, _, created = client("POST", "/api/v1/conversations/", {"title": "outage"})
    assert status == 201, created
    run_id = client.post(created["id"], "tell me a story")
    wait_until(lambda: asked, timeout=30, what="the model to be asked")

    def words_shown() -> bool:
        _, _, stored = client("GET", f"/api/v1/runs/{run_id}/events/")
        return any(e["type"] == "message.delta" for e in stored["events"])

    # The first words are stored, and shown, before the database goes: the rest
    # of the answer (half a second a word) streams while it is down.
    wait_until(words_shown, timeout=30, what="the answer's first words to be shown")
    database.halt()
    time.sleep(DOWN_S)
    assert worker.process.poll() is None, worker.log()[-3000:]
    database.resume()

    wait_until(lambda: client.run_ended(run_id), timeout=60, what="the run to end")
    run = client.run_ended(run_id)
    assert run["status"] == "completed", (run["status"], run["error"], worker.log()[-3000:])
    assert len(asked) == 1, f"the model was asked {len(asked)} times"
    status, _, page = client("GET", f"/api/v1/conversations/{created['id']}/messages/")
    assert [(m["role"], m["content"]) for m in page["results"]] == [
        ("user", "tell me a story"),
        ("assistant", STORY),
    ]
    # What a client replaying the run's events sees adds up to the stored answer.
    status, _, events = client("GET", f"/api/v1/runs/{run_id}/events/")
    assert status == 200, events
    deltas = [e["data"]["text"] for e in events["events"] if e["type"] == "message.delta"]
    assert "".join(deltas) == STORY, deltas
