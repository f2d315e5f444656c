"""The web process's CPU for one post: the rate check and `run_start` as a socket runs them.

On the production stack (PostgreSQL, Redis as broker, channel layer and cache,
a Celery worker), this process plays the web process: it posts `--posts`
messages one after another, each on a fresh conversation of its own user, the
way the WebSocket consumer does (`message_rate_check`, then `run_start`, which
stores the message, the queued run and its event, commits, publishes the
event and sends the task). CPU time is this thread's own (time.thread_time),
so the machine's other work does not count; the database's and Redis' share is
measured from their processes. `--profile` prints pyinstrument's tree of the
posts.

    .venv/bin/python bench/post_cost.py [--posts 300] [--profile]

Prints a table and writes bench/results/post_cost.json.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

from concurrent_turns import cpu_seconds
from stack import percentile, running_stack, write_results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=300)
    parser.add_argument("--profile", action="store_true", help="pyinstrument's tree of the posts")
    args = parser.parse_args()

    extra_env = {"TOOLCHAT_MESSAGE_RATE": "100000/min"}
    with running_stack(workers=1, concurrency=4, extra_env=extra_env) as stack:
        from django.contrib.auth import get_user_model

        from chat.message_rate import message_rate_check
        from chat.models import Conversation
        from chat.services.runs import run_start

        users = [
            get_user_model().objects.create_user(f"post{i}", password="bench-password-1")
            for i in range(args.posts + 20)
        ]
        conversations = [Conversation.objects.create(owner=user, title="bench") for user in users]

        def post(index: int) -> None:
            message_rate_check(users[index])
            run_start(conversation=conversations[index], content="what is 12*7")

        for index in range(20):  # warm: connections, caches, the first compiled queries
            post(index)
        profiler = None
        if args.profile:
            from pyinstrument import Profiler

            profiler = Profiler(interval=0.0005)
            profiler.start()
        cpu_ms: list[float] = []
        wall_ms: list[float] = []
        services_before = cpu_seconds({}, stack["service_pids"])["database"]
        for index in range(20, 20 + args.posts):
            started_cpu, started = time.thread_time(), time.perf_counter()
            post(index)
            cpu_ms.append(1000 * (time.thread_time() - started_cpu))
            wall_ms.append(1000 * (time.perf_counter() - started))
        services_ms = 1000 * (cpu_seconds({}, stack["service_pids"])["database"] - services_before)
        if profiler is not None:
            profiler.stop()

    rows = {
        "this thread's CPU per post, p50 (ms)": round(percentile(cpu_ms, 0.5), 2),
        "this thread's CPU per post, mean (ms)": round(statistics.fmean(cpu_ms), 2),
        "wall per post, p50 (ms)": round(percentile(wall_ms, 0.5), 2),
        "PostgreSQL and Redis CPU per post, mean (ms)": round(services_ms / args.posts, 2),
    }
    print(f"One post as the socket makes it, {args.posts} posts, production stack")
    for name, value in rows.items():
        print(f"  {name:<48}{value:>8}")
    if profiler is not None:
        print(profiler.output_text(unicode=False, color=False, show_all=False))
    path = write_results(
        "post_cost", {"posts": args.posts, "figures": rows, "machine": platform.platform()}
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
