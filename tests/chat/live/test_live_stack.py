"""Live events end to end: a real uvicorn, a real Celery worker, Redis, PostgreSQL.

The model is the scripted OpenAI-compatible server; everything else is what
production runs. Clients are plain WebSocket clients with a token.
"""

from __future__ import annotations

import json
import time

import pytest
from rest_framework.authtoken.models import Token
from websockets.sync.client import connect

from chat.models import Run, RunEvent, RunStatus
from tests.assertions import wait_until
from tests.factories import ConversationFactory
from tests.llm_server import text_reply, tool_calls_reply
from tests.plugins.servers import AsgiServer

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

ANSWER = " ".join(f"word{i}" for i in range(40))


@pytest.fixture
def live(celery_env, start_worker, user):
    """A worker, a server with Redis, a token and a conversation."""
    start_worker("w1")
    server = AsgiServer(env=celery_env["env"], log_path=celery_env["logs"] / "uvicorn.log")
    server.start()
    token = Token.objects.create(user=user)
    conversation = ConversationFactory(owner=user)
    yield {
        "url": f"ws://127.0.0.1:{server.port}/ws/conversations/{conversation.id}/",
        "ws": f"ws://127.0.0.1:{server.port}/ws/",
        "headers": {"Authorization": f"Token {token.key}"},
        "conversation": conversation,
        "server": server,
    }
    server.stop()


def read_until_done(socket, events, stop_after=None, timeout=30.0):
    """Read envelopes into `events` until run.completed (or until `stop_after` were read)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = json.loads(socket.recv(timeout=deadline - time.monotonic()))
        if "seq" not in message:
            continue  # ping, ack
        events.append(message)
        if message["type"] == "run.completed":
            return events
        if stop_after is not None and len(events) >= stop_after:
            return events
    raise AssertionError(f"no run.completed within {timeout}s; got {[e['type'] for e in events]}")


def script_two_pass(llm_server):
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "12*7"}')]),
        text_reply(ANSWER, chunk_delay_s=0.03),
    )


def test_a_client_sees_a_whole_two_pass_run_with_contiguous_seqs(live, llm_server):
    script_two_pass(llm_server)
    with connect(live["url"] + "?after=0", additional_headers=live["headers"]) as socket:
        socket.send(json.dumps({"type": "message", "content": "what is 12*7"}))
        events = read_until_done(socket, [])
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    assert types[:2] == ["message.created", "run.started"]  # the user's message, then the run
    assert events[0]["data"]["message"]["content"] == "what is 12*7"
    for expected in ("tool_call.started", "tool_call.completed", "tools.ended"):
        assert expected in types
    text = "".join(e["data"]["text"] for e in events if e["type"] == "message.delta")
    assert text == ANSWER
    # What the client saw is exactly what is stored.
    stored = list(
        RunEvent.objects.filter(conversation=live["conversation"]).values_list("seq", "type")
    )
    assert stored == [(e["seq"], e["type"]) for e in events]


def test_a_client_that_drops_and_resumes_sees_the_same_sequence(live, llm_server):
    script_two_pass(llm_server)
    headers = live["headers"]
    with connect(live["url"] + "?after=0", additional_headers=headers) as steady:
        with connect(live["url"] + "?after=0", additional_headers=headers) as flaky:
            steady.send(json.dumps({"type": "message", "content": "what is 12*7"}))
            seen = read_until_done(flaky, [], stop_after=8)
        assert seen[-1]["type"] != "run.completed", "the run ended before the drop"
        # Events go on while the client is away: the resume has some to fill in.
        wait_until(
            RunEvent.objects.filter(
                conversation=live["conversation"], seq__gt=seen[-1]["seq"]
            ).exists,
            what="an event while the client is away",
        )
        with connect(live["url"], additional_headers=headers) as again:
            again.send(json.dumps({"type": "resume", "after": seen[-1]["seq"]}))
            resumed = read_until_done(again, list(seen))
        reference = read_until_done(steady, [])
    assert [e["seq"] for e in resumed] == [e["seq"] for e in reference]
    assert resumed == reference


def test_a_slow_client_still_gets_every_event(live, llm_server):
    script_two_pass(llm_server)
    with connect(live["url"] + "?after=0", additional_headers=live["headers"]) as socket:
        socket.send(json.dumps({"type": "message", "content": "what is 12*7"}))
        events = read_until_done(socket, [], stop_after=3)
        # Not reading while the run goes on and ends.
        wait_until(
            Run.objects.filter(
                conversation=live["conversation"], status=RunStatus.COMPLETED
            ).exists,
            timeout=30,
            what="the run to end while the client is not reading",
        )
        events = read_until_done(socket, events)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    stored = RunEvent.objects.filter(conversation=live["conversation"]).count()
    assert len(events) == stored


def test_the_origin_check_and_auth_hold_on_the_real_server(live):
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    with pytest.raises(InvalidStatus):
        connect(live["url"], origin="http://evil.example", additional_headers=live["headers"])
    # No credentials, with or without an allowed Origin: the documented 4401 close.
    for origin in (None, "http://127.0.0.1"):
        with (
            connect(live["url"], origin=origin) as anonymous,
            pytest.raises(ConnectionClosed) as closed,
        ):
            anonymous.recv(timeout=5)
        assert closed.value.rcvd.code == 4401


def sse_events(response, stop_after=None):
    """Parse an SSE response into envelopes, until the run's end (or `stop_after` events)."""
    events, data = [], []
    for raw in response:
        line = raw.decode().rstrip("\n")
        if line.startswith("data: "):
            data.append(line[len("data: ") :])
        elif line == "" and data:
            events.append(json.loads("\n".join(data)))
            data = []
            if events[-1]["type"] == "run.completed" or len(events) == stop_after:
                return events
    return events


def test_sse_with_last_event_id_resumes_to_the_identical_sequence(live, llm_server):
    import urllib.request

    script_two_pass(llm_server)
    base = live["ws"].replace("ws://", "http://").split("/ws/")[0]
    token = live["headers"]["Authorization"]
    post = urllib.request.Request(
        f"{base}/api/v1/conversations/{live['conversation'].id}/messages/",
        data=json.dumps({"content": "what is 12*7"}).encode(),
        headers={"Authorization": token, "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(post, timeout=10) as response:
        run_id = json.load(response)["run"]["id"]
    events_url = f"{base}/api/v1/runs/{run_id}/events/"
    stream = {"Authorization": token, "Accept": "text/event-stream"}
    with urllib.request.urlopen(
        urllib.request.Request(events_url, headers=stream), timeout=30
    ) as response:
        first = sse_events(response, stop_after=6)
    assert first[-1]["type"] != "run.completed", "the run ended before the drop"
    resume = {**stream, "Last-Event-ID": str(first[-1]["seq"])}
    with urllib.request.urlopen(
        urllib.request.Request(events_url, headers=resume), timeout=30
    ) as response:
        rest = sse_events(response)
    with urllib.request.urlopen(
        urllib.request.Request(events_url, headers=stream), timeout=30
    ) as response:
        reference = sse_events(response)
    assert first + rest == reference
    assert [e["seq"] for e in reference] == list(range(1, len(reference) + 1))
    assert reference[-1]["type"] == "run.completed"


# channels_redis blocks on Redis (BZPOPMIN) for 5 s at a time; redis-py 8 gave up
# on a read after 5 s, so an idle socket died within about 5 s. Three times that
# shows the race is gone without the minute the first reproduction of it took.
IDLE_S = 15.0


def test_an_idle_socket_on_redis_stays_open_and_gets_a_later_run(live, llm_server):
    from websockets.exceptions import ConnectionClosed

    llm_server.push(text_reply("still here"))
    with connect(live["url"] + "?after=0", additional_headers=live["headers"]) as socket:
        try:
            message = socket.recv(timeout=IDLE_S)
        except TimeoutError:
            message = None  # quiet, and still open
        except ConnectionClosed as closed:
            raise AssertionError(f"the idle socket was dropped: {closed!r}") from closed
        assert message is None or json.loads(message) == {"type": "ping"}
        socket.send(json.dumps({"type": "message", "content": "are you there"}))
        events = read_until_done(socket, [])
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    text = "".join(e["data"]["text"] for e in events if e["type"] == "message.delta")
    assert text == "still here"


def test_wait_true_on_redis_answers_200_json_after_a_long_quiet_run(live, llm_server):
    import urllib.error
    import urllib.request

    # A tool call that is quiet for 14 s: the stream behind ?wait=true backs off
    # (1, 2, 4 s) and then waits on the layer for 8 s, past redis-py 8's 5 s read.
    llm_server.push(
        tool_calls_reply([("slow_step", '{"label": "long", "seconds": 14}')]),
        text_reply("all done"),
    )
    base = live["server"].base_url
    post = urllib.request.Request(
        f"{base}/api/v1/conversations/{live['conversation'].id}/messages/?wait=true&timeout=60",
        data=json.dumps({"content": "take your time"}).encode(),
        headers={**live["headers"], "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(post, timeout=90) as response:
            status, content_type, body = (
                response.status,
                response.headers["Content-Type"],
                json.load(response),
            )
    except urllib.error.HTTPError as error:
        detail = error.read().decode(errors="replace")[:300]
        raise AssertionError(f"?wait=true answered {error.code}: {detail}") from error
    assert status == 200
    assert content_type.startswith("application/json")
    assert body["run"]["status"] == "completed"
    assert body["message"]["content"] == "all done"


def test_hostile_frames_on_the_real_server_get_errors_and_the_socket_lives_on(live, llm_server):
    """NUL, lone surrogates and deep nesting through uvicorn: an error each, nothing dropped."""
    from tests.chat.live.test_consumers import DEEP

    frames = [
        '{"type": "message", "content": "a\\u0000b"}',
        '{"type": "message", "content": "\\ud800"}',
        DEEP,
        '{"type": "\\ud800\\u0000"}',
        '{"type": "cancel", "run_id": "\\udfff"}',
        '{"type": "resume", "after": 1e999}',
    ]
    llm_server.push(text_reply("still here"))
    with connect(live["url"] + "?after=0", additional_headers=live["headers"]) as socket:
        for frame in frames:
            socket.send(frame)
            reply = json.loads(socket.recv(timeout=10))
            while reply["type"] == "ping":
                reply = json.loads(socket.recv(timeout=10))
            assert reply["type"] == "error", (frame[:40], reply)
        assert not Run.objects.filter(conversation=live["conversation"]).exists()
        socket.send(json.dumps({"type": "message", "content": "are you there"}))
        events = read_until_done(socket, [])
    text = "".join(e["data"]["text"] for e in events if e["type"] == "message.delta")
    assert text == "still here"


def _group_channels(redis_url: str) -> list[str]:
    """The groups a web process follows now: their pub/sub channels (chat/live/subscription.py)."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        return sorted(c.decode() for c in client.pubsub_channels("*:group:*"))
    finally:
        client.close()


def test_v1_on_redis_follows_a_conversation_only_while_it_streams(
    live, llm_server, user, redis_url
):
    """A streamed /v1 answer follows its conversation's group on the process's one
    subscription, and leaves it when done; an answer not streamed waits for the end
    alone, and follows nothing (it needs no delta)."""
    import threading

    from openai import OpenAI

    token = Token.objects.get(user=user)
    client = OpenAI(base_url=f"{live['server'].base_url}/v1", api_key=token.key, max_retries=0)
    messages = [{"role": "user", "content": "hello"}]
    for stream in (False, True):
        gate = threading.Event()
        llm_server.push(text_reply("hi there", gate=gate))
        answered: dict[str, str] = {}

        def ask(stream: bool = stream, answered: dict[str, str] = answered) -> None:
            if stream:
                chunks = client.chat.completions.create(
                    model="openai/test-model", messages=messages, stream=True
                )
                answered["text"] = "".join(c.choices[0].delta.content or "" for c in chunks)
            else:
                reply = client.chat.completions.create(model="openai/test-model", messages=messages)
                answered["text"] = reply.choices[0].message.content or ""

        asking = threading.Thread(target=ask)
        asking.start()
        wait_until(lambda: Run.objects.filter(status=RunStatus.RUNNING).exists(), timeout=30)
        if stream:
            wait_until(lambda: len(_group_channels(redis_url)) == 1, timeout=10)
        followed = _group_channels(redis_url)
        gate.set()
        asking.join(60)
        assert answered == {"text": "hi there"}
        if stream:
            assert len(followed) == 1
            assert ":group:conversation." in followed[0]
            wait_until(lambda: _group_channels(redis_url) == [], timeout=10)
        else:
            assert followed == [], "a wait for an answer not streamed followed the events"
