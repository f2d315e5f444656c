"""WebSocket posts under load: how long until each of N sockets posting at once is acknowledged.

On the production stack (uvicorn, Celery worker, PostgreSQL, Redis), N users
each open a socket on a conversation of their own, wait until every socket is
open, then all send `{"type": "message"}` at the same moment. What is timed is
the send to the `ack` (the message and its queued run stored, the task sent):
the web process's share of a post, which is what a user waits for before
their message shows as sent. Rounds repeat it on fresh conversations, each
once the turns of the round before have ended.

    .venv/bin/python bench/ws_posts.py [--sockets 100] [--rounds 3] [--profile]

Each round also says the CPU the web process, the worker and the database
used from the first send to the last ack. `--profile` runs py-spy on the web
process through the rounds (only the thread holding the GIL) and prints
where its CPU went.

Prints a table and writes bench/results/ws_posts.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import time
from pathlib import Path

from concurrent_turns import cpu_seconds
from profile_turn import profile_print, profile_start, profile_stop, summarize
from stack import percentile, running_stack, write_results

# py-spy's collapsed stacks of the web process (`--profile`), for a flame graph.
RESULTS = Path(__file__).resolve().parent / "results"


async def one_round(
    ws_url: str, sockets: list[tuple[str, str]], stack: dict, profile: Path | None
) -> tuple[list[float], dict[str, float]]:
    """Open every socket, post on all at once; the seconds from each send to its ack.

    And the CPU seconds each part of the stack used from the sends to the last ack;
    with `profile`, py-spy's samples of the web process over that time are added to it.
    """
    from websockets.asyncio.client import connect

    opened = [
        await connect(
            f"{ws_url}/ws/conversations/{conversation}/?after=0",
            additional_headers={"Authorization": f"Token {token}"},
            max_queue=None,
        )
        for conversation, token in sockets
    ]
    start = asyncio.Event()

    async def post(socket) -> float:  # type: ignore[no-untyped-def]
        await start.wait()
        sent = time.perf_counter()
        await socket.send(json.dumps({"type": "message", "content": "what is 12*7"}))
        while True:
            message = json.loads(await asyncio.wait_for(socket.recv(), 60))
            if message.get("type") == "ack":
                return time.perf_counter() - sent
            if message.get("type") == "error":
                raise RuntimeError(message)

    tasks = [asyncio.create_task(post(socket)) for socket in opened]
    spy = profile_start(stack["pids"]["web"], profile) if profile else None
    await asyncio.sleep(1.0 if spy else 0.2)  # every task is waiting on the event
    before = cpu_seconds(stack["pids"], stack["service_pids"])
    start.set()
    try:
        waits = list(await asyncio.gather(*tasks))
        after = cpu_seconds(stack["pids"], stack["service_pids"])
        return waits, {name: after[name] - before[name] for name in after}
    finally:
        if spy:
            profile_stop(spy, profile)
        for socket in opened:
            await socket.close()


def runs_settle(timeout: float) -> None:
    """Wait until no run is queued or running."""
    from chat.models import ACTIVE_RUN_STATUSES, Run

    deadline = time.monotonic() + timeout
    while Run.objects.filter(status__in=ACTIVE_RUN_STATUSES).exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"runs still active after {timeout:.0f} s")
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sockets", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--profile", action="store_true", help="py-spy on the web process through the rounds"
    )
    args = parser.parse_args()

    extra_env = {"TOOLCHAT_MESSAGE_RATE": "100000/min"}
    with running_stack(workers=1, concurrency=20, extra_env=extra_env) as stack:
        from django.contrib.auth import get_user_model
        from rest_framework.authtoken.models import Token

        from chat.models import Conversation

        users = [
            get_user_model().objects.create_user(f"bench{i}", password="bench-password-1")
            for i in range(args.sockets)
        ]
        tokens = [Token.objects.create(user=user).key for user in users]
        rounds = []
        cpus = []
        loads = []  # the machine's 1-minute load average as each round starts
        folded = RESULTS / "ws_posts.folded" if args.profile else None
        if folded:
            folded.write_text("")
        for _ in range(args.rounds):
            loads.append(os.getloadavg()[0])
            sockets = [
                (str(Conversation.objects.create(owner=user, title="bench").id), token)
                for user, token in zip(users, tokens, strict=True)
            ]
            waits, cpu = asyncio.run(one_round(stack["ws"], sockets, stack, folded))
            rounds.append([w * 1000 for w in waits])
            cpus.append(cpu)
            # The next round starts on a settled stack: the turns these posts started
            # would otherwise still be running beside its posts, and each round would
            # time the one before it too.
            runs_settle(timeout=180)
        profile = summarize(folded, top=25) if folded else None

    print(f"WebSocket post -> ack, {args.sockets} sockets posting at once, production stack")
    print(
        f"{'round':<8}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}{'load':>8}"
        f"{'web s':>8}{'worker s':>10}{'db s':>7}{'other s':>9}"
    )
    summary = []
    for index, waits in enumerate(rounds, 1):
        row = {
            "p50_ms": round(percentile(waits, 0.5), 1),
            "p95_ms": round(percentile(waits, 0.95), 1),
            "max_ms": round(max(waits), 1),
            "load_average": round(loads[index - 1], 2),
            # CPU seconds from the first send to the last ack: "other" is this
            # process (the clients) and whatever else ran on the machine.
            "cpu_s": {
                "web": round(cpus[index - 1]["web"], 2),
                "worker": round(cpus[index - 1]["workers"], 2),
                "database": round(cpus[index - 1]["database"], 2),
                "other": round(cpus[index - 1]["bench"] + cpus[index - 1]["rest"], 2),
            },
        }
        summary.append(row)
        print(
            f"{index:<8}{row['p50_ms']:>10}{row['p95_ms']:>10}{row['max_ms']:>10}"
            f"{row['load_average']:>8}{row['cpu_s']['web']:>8}{row['cpu_s']['worker']:>10}"
            f"{row['cpu_s']['database']:>7}{row['cpu_s']['other']:>9}"
        )
    if profile:
        profile_print("the web process", profile)
    path = write_results(
        "ws_posts",
        {
            "sockets": args.sockets,
            "rounds": summary,
            "profile": profile,
            "machine": platform.platform(),
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
