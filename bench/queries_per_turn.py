"""SQL queries per turn against the length of the conversation's history.

For each history length (0, 10, 100, 1,000 and 5,000 prior messages,
bulk-inserted), runs a two-pass turn with one calculator call in this
process, inline (`TOOLCHAT_TASKS_EAGER`: the whole turn runs in the caller's
thread, in autocommit, so the on-commit dispatches run at once), against a
private PostgreSQL and the zero-latency scripted model through the openai
provider. Counts the SQL queries of the turn (`CaptureQueriesContext`) and
times it. The query count should not depend on the history's length.

    .venv/bin/python bench/queries_per_turn.py [--lengths 0,10,100,1000,5000] [--repeat 3] [--dump]

Prints a table and writes bench/results/queries_per_turn.json.
"""

from __future__ import annotations

import argparse
import logging
import platform
import time
from collections import Counter
from typing import Any

from stack import percentile, running_database, write_results


def seed_history(owner: Any, length: int) -> Any:
    """A conversation with `length` prior messages: user / assistant tool_calls / tool / answer."""
    from chat.models import Conversation, Message, Role

    conversation = Conversation.objects.create(owner=owner, title="bench", system_prompt="Brief.")
    rows = []
    for position in range(length):
        turn, kind = divmod(position, 4)
        if position == length - 1 and kind == 1:
            kind = 3  # never end on unanswered tool calls
        call_id = f"call_{conversation.pk.hex[:8]}_{turn}"
        if kind == 0:
            row = Message(role=Role.USER, content=f"question {turn}: what is {turn}*7?")
        elif kind == 1:
            calls = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": "calculator",
                        "arguments": f'{{"expression": "{turn}*7"}}',
                    },
                }
            ]
            row = Message(role=Role.ASSISTANT, content=None, tool_calls=calls)
        elif kind == 2:
            row = Message(
                role=Role.TOOL, tool_call_id=call_id, name="calculator", content=str(turn * 7)
            )
        else:
            row = Message(role=Role.ASSISTANT, content=f"{turn} times 7 is {turn * 7}.")
        row.conversation = conversation
        row.position = position
        rows.append(row)
    Message.objects.bulk_create(rows, batch_size=1000)
    return conversation


def kind_of(sql: str) -> str:
    word = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else "?"
    return word if word in {"SELECT", "INSERT", "UPDATE", "DELETE"} else "other"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lengths", default="0,10,100,1000,5000", help="prior messages")
    parser.add_argument("--repeat", type=int, default=3, help="turns per length (fresh history)")
    parser.add_argument(
        "--dump", action="store_true", help="print every query of the last turn, in order"
    )
    args = parser.parse_args()
    lengths = [int(value) for value in args.lengths.split(",")]

    rows: list[dict[str, Any]] = []
    last_turn: list[str] = []
    with running_database() as database:
        from django.conf import settings
        from django.contrib.auth import get_user_model
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        from chat.models import Run, RunEvent, RunStatus
        from chat.services.runs import run_start

        logging.disable(logging.INFO)  # the turn's own INFO lines would drown the table
        settings.TOOLCHAT_TASKS_EAGER = True
        assert settings.TOOLCHAT_TASKS_IN_PROCESS, "REDIS_URL must be unset"
        assert connection.get_autocommit()
        user = get_user_model().objects.create_user("bench", password="bench-password-1")
        deadline = time.monotonic() + 240
        # One untimed turn first: imports, the openai client, the connection pool.
        run_start(conversation=seed_history(user, 0), content="what is 12*7")
        for length in lengths:
            counts: list[int] = []
            walls: list[float] = []
            kinds: Counter[str] = Counter()
            sent: list[int] = []
            events: list[int] = []
            deltas: list[int] = []
            for _ in range(args.repeat):
                if time.monotonic() > deadline:
                    break
                conversation = seed_history(user, length)
                database["llm"].clear()
                with CaptureQueriesContext(connection) as queries:
                    started = time.perf_counter()
                    run = run_start(conversation=conversation, content="what is 12*7")
                    walls.append((time.perf_counter() - started) * 1000)
                run = Run.objects.get(pk=run.pk)
                if run.status != RunStatus.COMPLETED or run.model_calls != 2:
                    raise RuntimeError(f"turn did not complete: {run.status} {run.error}")
                counts.append(len(queries))
                last_turn = [query["sql"] for query in queries.captured_queries]
                kinds = Counter(kind_of(query["sql"]) for query in queries.captured_queries)
                sent.append(len(database["llm"].requests[0]["messages"]))
                events.append(RunEvent.objects.filter(run=run).count())
                deltas.append(RunEvent.objects.filter(run=run, type="message.delta").count())
            rows.append(
                {
                    "history": length,
                    "turns": len(counts),
                    "queries": sorted(set(counts)),
                    "by_kind": dict(kinds),
                    "messages_sent_first_call": sent[0] if sent else None,
                    "events": sorted(set(events)),
                    "delta_events": sorted(set(deltas)),
                    "wall_ms_p50": percentile(walls, 0.5),
                    "wall_ms_max": max(walls) if walls else float("nan"),
                }
            )

    if args.dump:
        print(f"The last turn's {len(last_turn)} queries, in order:")
        for number, sql in enumerate(last_turn, 1):
            print(f"{number:>3}  {' '.join(sql.split())[:300]}")
        print()
    print("SQL queries of a two-pass turn (1 tool call) by history length, PostgreSQL, inline")
    print(
        f"{'history':>8}{'turns':>7}{'queries':>9}{'select':>8}{'insert':>8}{'update':>8}"
        f"{'other':>7}{'events':>8}{'deltas':>8}{'sent':>6}{'wall p50 ms':>13}{'wall max ms':>13}"
    )
    for row in rows:
        queries = "/".join(str(count) for count in row["queries"])
        kinds = row["by_kind"]
        print(
            f"{row['history']:>8}{row['turns']:>7}{queries:>9}{kinds.get('SELECT', 0):>8}"
            f"{kinds.get('INSERT', 0):>8}{kinds.get('UPDATE', 0):>8}"
            f"{kinds.get('other', 0) + kinds.get('DELETE', 0):>7}"
            f"{'/'.join(map(str, row['events'])):>8}{'/'.join(map(str, row['delta_events'])):>8}"
            f"{row['messages_sent_first_call']:>6}{row['wall_ms_p50']:>13.1f}{row['wall_ms_max']:>13.1f}"
        )
    print("queries: distinct counts seen over the turns; events: RunEvent rows of the turn,")
    print("deltas: of which message.delta (coalesced by time, TOOLCHAT_DELTA_INTERVAL_S, so a")
    print("slower stream can store one more: 1 query each); sent: messages in the first model")
    print("request (history trimmed to TOOLCHAT_HISTORY_MAX_MESSAGES=400; rows loaded in 1 query)")
    path = write_results(
        "queries_per_turn",
        {"repeat": args.repeat, "machine": platform.platform(), "lengths": rows},
    )
    print(f"written to {path}")


if __name__ == "__main__":
    main()
