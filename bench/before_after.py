"""The embedded default before and after a change, beside the bare loop, in one run.

`compare.py` measures one checkout; on a machine shared with other work, two
runs of it minutes apart differ by more than most changes do. This starts the
embedded default (uvicorn, SQLite, in-process tasks, as compare.py starts it)
twice: from this checkout ("after") and from `--before` (a git revision,
exported with `git archive` into a temporary folder, run with this virtualenv),
against one scripted model, and runs their turns and the bare loop's
interleaved, in an order rotated from round to round, so that whatever the
machine does falls on all three alike:

- two-pass turn: `POST …/messages/?wait=true` on a fresh conversation until
  the 200, against one bare turn (ratio of the p50s);
- time to first token: a WebSocket already open on a fresh conversation sends
  `{"type": "message"}`, until the first `message.delta` with text, against
  the bare loop's first text of its answer call (difference of the p50s).

    .venv/bin/python bench/before_after.py --before 62d64db [--turns 60]

Prints a table and writes bench/results/before_after.json.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bare_loop import bare_turn, make_client, offered_tools, turn_content
from compare import CREATE_TOKEN, EMBEDDED_ENV, Client
from stack import (
    BENCH_ENV,
    ROOT,
    ScriptedLLMServer,
    _model_env,
    percentile,
    stepping_responder,
    write_results,
)

from tests.plugins.servers import free_port, server_environment

UVICORN = [
    sys.executable,
    *("-m", "uvicorn", "project.asgi:application", "--host", "127.0.0.1", "--lifespan", "off"),
]


@contextlib.contextmanager
def exported(revision: str) -> Iterator[Path]:
    """The tree of `revision`, exported into a temporary folder."""
    folder = Path(tempfile.mkdtemp(prefix="toolchat-before-"))
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", revision], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def embedded(root: Path, llm: ScriptedLLMServer) -> Iterator[dict[str, Any]]:
    """The embedded default of the checkout at `root`: migrated, a user with a token, uvicorn."""
    folder = Path(tempfile.mkdtemp(prefix="toolchat-bench-embedded-"))
    env = server_environment(
        **{
            **_model_env(llm),
            **BENCH_ENV,
            **EMBEDDED_ENV,
            "DATABASE_URL": f"sqlite:///{folder / 'db.sqlite3'}",
            "DJANGO_STATIC_ROOT": str(folder / "static"),
        }
    )
    # The checkout's own packages, not this one's (the virtualenv's editable install).
    env["PYTHONPATH"] = str(root)
    manage = [sys.executable, "manage.py"]
    subprocess.run(
        [*manage, "migrate", "--noinput"], cwd=root, env=env, check=True, capture_output=True
    )
    token = subprocess.run(
        [*manage, "shell", "-c", CREATE_TOKEN],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()[-1]
    port = free_port()
    with (folder / "uvicorn.log").open("wb") as log:
        process = subprocess.Popen(
            [*UVICORN, "--port", str(port)],
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        import urllib.request

        deadline = time.monotonic() + 60
        while True:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{base}/healthz/", timeout=2) as response,
            ):
                if response.status == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((folder / "uvicorn.log").read_text(errors="replace")[-3000:])
            time.sleep(0.1)
        yield {"http": base, "ws": base.replace("http", "ws", 1), "token": token}
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", required=True, help="a git revision (e.g. main, 62d64db)")
    parser.add_argument("--turns", type=int, default=60, help="timed rounds")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds first")
    args = parser.parse_args()

    llm = ScriptedLLMServer(responder=stepping_responder()).start()
    content = turn_content(1)
    samples: dict[str, list[float]] = {}
    try:
        with (
            exported(args.before) as before_root,
            embedded(before_root, llm) as before_server,
            embedded(ROOT, llm) as after_server,
        ):
            apps = {
                "before": Client("before", before_server, before_server["token"]),
                "after": Client("after", after_server, after_server["token"]),
            }
            client, tools = make_client(llm.base_url), offered_tools()
            answer = bare_turn(client, tools=tools, content=content).answer

            def bare() -> None:
                turn = bare_turn(client, tools=tools, content=content)
                samples.setdefault("two_pass/bare", []).append(turn.total_ms)
                if turn.first_token_ms is not None:
                    samples.setdefault("first_token/bare", []).append(turn.first_token_ms)

            def post(name: str) -> None:
                elapsed = apps[name].post_turn("two_pass", content, answer)
                samples.setdefault(f"two_pass/{name}", []).append(elapsed)

            def socket(name: str) -> None:
                first, _ = apps[name].socket_turn(content)
                samples.setdefault(f"first_token/{name}", []).append(first)

            trials = [
                bare,
                lambda: post("before"),
                lambda: post("after"),
                lambda: socket("before"),
                lambda: socket("after"),
            ]
            for number in range(args.warmup + args.turns):
                if number == args.warmup:
                    samples.clear()
                shift = number % len(trials)
                for trial in trials[shift:] + trials[:shift]:
                    trial()
    finally:
        llm.stop()

    p50 = {key: percentile(values, 0.5) for key, values in samples.items()}
    p95 = {key: percentile(values, 0.95) for key, values in samples.items()}
    print(
        f"embedded default, {args.before} (before) and this checkout (after), {args.turns} rounds"
    )
    print(f"{'(ms)':<44}{'p50':>8}{'p95':>8}{'vs bare':>10}")
    for kind, title in (("two_pass", "two-pass turn, POST ?wait=true"), ("first_token", "TTFT")):
        for name in ("bare", "before", "after"):
            key = f"{kind}/{name}"
            if kind == "two_pass":
                versus = f"{p50[key] / p50[f'{kind}/bare']:.1f}x"
            else:
                versus = f"{p50[key] - p50[f'{kind}/bare']:+.1f} ms"
            print(f"{title + ': ' + name:<44}{p50[key]:>8.1f}{p95[key]:>8.1f}{versus:>10}")
    write_results(
        "before_after", {"before": args.before, "p50": p50, "p95": p95, "samples_ms": samples}
    )


if __name__ == "__main__":
    main()
