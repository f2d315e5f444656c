"""/v1/chat/completions beside the REST API, and the lookup of a request's conversation.

Part 1, in one run with one scripted model on loopback that answers at once:
the embedded default as `make run` serves it (uvicorn, SQLite, DEBUG on, runs
in in-process threads), and in rotating order each round:

- REST: a two-pass turn, `POST /api/v1/conversations/{id}/messages/?wait=true`
  on a conversation made beforehand (untimed), until the 200;
- /v1 new: the same turn as `POST /v1/chat/completions` (mode two_pass by
  header) with a history that starts a new conversation (made in the request);
- /v1 follow-up: the next request of that client conversation (its history
  resent, plus a question), which finds and continues the conversation.

Part 2, in this process against a private PostgreSQL: `thread_find` for a
20-message request, for a user with 10, 1,000 and 10,000 conversations held
through /v1 (each with its digest): the median time and the SQL queries.

    .venv/bin/python bench/openai_api.py [--rounds 30] [--quick]

Prints two tables and writes bench/results/openai_api.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import platform
import secrets
import time
from typing import Any
from urllib.parse import urlsplit

from compare import TURN_TIMEOUT_S, running_embedded
from stack import ScriptedLLMServer, percentile, running_database, stepping_responder, write_results

QUESTION = "What is 12*7?"
MODEL = "openai/bench-model"


class Api:
    """One kept-alive connection to the server, with the user's token."""

    def __init__(self, server: dict[str, Any]) -> None:
        address = urlsplit(server["http"])
        self.connection = http.client.HTTPConnection(
            address.hostname, address.port, timeout=TURN_TIMEOUT_S + 30
        )
        self.token = server["token"]

    def request(self, path: str, body: dict[str, Any], **headers: str) -> tuple[int, Any, float]:
        scheme = "Bearer" if path.startswith("/v1/") else "Token"  # as each API takes it
        all_headers = {
            "Authorization": f"{scheme} {self.token}",
            "Content-Type": "application/json",
            **headers,
        }
        started = time.perf_counter()
        self.connection.request("POST", path, body=json.dumps(body), headers=all_headers)
        response = self.connection.getresponse()
        payload = json.loads(response.read())
        return response.status, payload, (time.perf_counter() - started) * 1000


def rest_turn(api: Api) -> float:
    status, conversation, _ = api.request(
        "/api/v1/conversations/", {"title": "bench", "mode": "two_pass"}
    )
    assert status == 201, conversation
    path = f"/api/v1/conversations/{conversation['id']}/messages/?wait=true&timeout=30"
    status, payload, elapsed = api.request(path, {"content": QUESTION})
    if status != 200 or payload["run"]["status"] != "completed":
        raise RuntimeError(f"REST turn: {status} {payload}")
    return elapsed


def v1_turns(api: Api) -> tuple[float, float]:
    """A new client conversation and its follow-up: ms of each request."""
    messages = [
        {"role": "system", "content": f"Session {secrets.token_hex(4)}."},
        {"role": "user", "content": QUESTION},
    ]
    times = []
    for _ in range(2):
        status, payload, elapsed = api.request(
            "/v1/chat/completions",
            {"model": MODEL, "messages": messages},
            **{"X-Toolchat-Mode": "two_pass"},
        )
        if status != 200:
            raise RuntimeError(f"/v1 turn: {status} {payload}")
        times.append(elapsed)
        messages += [payload["choices"][0]["message"], {"role": "user", "content": QUESTION}]
    return times[0], times[1]


def part_turns(rounds: int, warmup: int) -> dict[str, list[float]]:
    llm = ScriptedLLMServer(responder=stepping_responder()).start()
    samples: dict[str, list[float]] = {"REST": [], "/v1 new": [], "/v1 follow-up": []}
    try:
        with running_embedded(llm) as server:
            api = Api(server)
            for number in range(warmup + rounds):
                trials = ["rest", "v1"] if number % 2 else ["v1", "rest"]
                for trial in trials:
                    if trial == "rest":
                        value = rest_turn(api)
                        if number >= warmup:
                            samples["REST"].append(value)
                    else:
                        new, follow = v1_turns(api)
                        if number >= warmup:
                            samples["/v1 new"].append(new)
                            samples["/v1 follow-up"].append(follow)
    finally:
        llm.stop()
    return samples


def part_lookup(sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    with running_database():
        from django.contrib.auth import get_user_model
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        from chat.models import Conversation
        from chat.openai_api.threads import ClientMessage, digests, thread_find

        user = get_user_model().objects.create_user("bench-lookup", password="bench-password-1")
        rows = []
        made = 0
        for size in sizes:
            batch = [
                Conversation(owner=user, title="bench", client_digest=secrets.token_hex(32))
                for _ in range(size - made)
            ]
            Conversation.objects.bulk_create(batch, batch_size=2000)
            made = size
            with connection.cursor() as cursor:
                # What autovacuum does after a bulk insert: without statistics the
                # planner guesses the user has a handful of rows and scans them all.
                cursor.execute("ANALYZE chat_conversation")
            messages = [
                ClientMessage(
                    "user" if i % 2 == 0 else "assistant", f"message {i} {secrets.token_hex(4)}"
                )
                for i in range(19)
            ] + [ClientMessage("user", "the new question")]
            chain = digests(messages)
            target = Conversation.objects.filter(owner=user).order_by("?").first()
            assert target is not None
            Conversation.objects.filter(pk=target.pk).update(client_digest=chain[19])
            timings = []
            for _ in range(repeat):
                started = time.perf_counter()
                with CaptureQueriesContext(connection) as queries:
                    found, held = thread_find(user, chain, "")
                timings.append((time.perf_counter() - started) * 1000)
                assert found is not None
                assert found.pk == target.pk
                assert held == 19
            rows.append(
                {
                    "conversations": size,
                    "p50_ms": round(percentile(timings, 0.5), 3),
                    "p95_ms": round(percentile(timings, 0.95), 3),
                    "queries": len(queries),
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="10 rounds, 100 lookups")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    rounds, repeat = (10, 100) if args.quick else (args.rounds, 300)
    samples = part_turns(rounds, warmup=3)
    rest = percentile(samples["REST"], 0.5)
    print(f"\nA two-pass turn, embedded default, {rounds} rounds (ms, p50 / p95)")
    print(f"{'request':<16}{'p50':>10}{'p95':>10}{'vs REST':>12}")
    turns = {}
    for name, values in samples.items():
        p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
        turns[name] = {"p50_ms": round(p50, 1), "p95_ms": round(p95, 1), "n": len(values)}
        ratio = f"{p50 / rest:.2f}x {p50 - rest:+.1f}"
        print(f"{name:<16}{p50:>10.1f}{p95:>10.1f}{ratio:>12}")
    lookup = part_lookup([10, 1000, 10000], repeat)
    print("\nFinding a 20-message request's conversation (thread_find, PostgreSQL)")
    print(f"{'conversations':>14}{'p50 ms':>10}{'p95 ms':>10}{'queries':>9}")
    for row in lookup:
        print(
            f"{row['conversations']:>14,}{row['p50_ms']:>10.3f}{row['p95_ms']:>10.3f}"
            f"{row['queries']:>9}"
        )
    path = write_results(
        "openai_api",
        {
            "machine": {"python": platform.python_version(), "cpus": platform.machine()},
            "rounds": rounds,
            "turns": turns,
            "lookup": lookup,
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
