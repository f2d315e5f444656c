"""Where the embedded default's two-pass turn spends its CPU: py-spy on the web process.

Starts the scripted model (zero latency) and the embedded default as
`bench/compare.py` does (uvicorn, SQLite, in-process tasks, DJANGO_DEBUG=1),
with uvicorn run under `py-spy record`, posts `--turns` two-pass turns
(`POST …/messages/?wait=true` on a fresh conversation, the same as
compare.py's row) and, with `--sockets`, as many turns posted on a WebSocket
(the time-to-first-token path); then stops the server and sums py-spy's
samples (the thread holding the GIL: Python's CPU) two ways:

- self: the functions the samples were in, grouped by module;
- total: the share of samples with a given function of ours (chat/, tools/,
  project/) or a given library entry point anywhere on the stack.

    .venv/bin/python bench/profile_turn.py [--turns 300] [--sockets 0] [--rate 250]
    .venv/bin/python bench/profile_turn.py --no-profile     # the turns and the breakdown only
    .venv/bin/python bench/profile_turn.py --inline 50      # pyinstrument, one thread

`--inline N` runs N turns inline (TOOLCHAT_TASKS_EAGER: the run inside
`run_start`, in this thread) on SQLite under pyinstrument, and prints its
call tree: the wall time of one turn's own work, without the HTTP request
around it or the thread hand-offs.

py-spy is a dev dependency (`make .venv/.installed-dev`). Prints the top
entries and writes bench/results/profile_turn.json (and py-spy's collapsed
stacks, bench/results/profile_turn.folded, for a flame graph).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bare_loop import turn_content
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

FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
OURS = ("chat/", "tools/", "project/")


def start_profiled(
    llm: ScriptedLLMServer, folder: Path, rate: int, *, profile: bool = True
) -> tuple[Any, dict[str, Any]]:
    """The embedded default under py-spy; its py-spy process and its client settings."""
    env = {
        **_model_env(llm),
        **BENCH_ENV,
        **EMBEDDED_ENV,
        "DATABASE_URL": f"sqlite:///{folder / 'db.sqlite3'}",
        "DJANGO_STATIC_ROOT": str(folder / "static"),
    }
    full_env = server_environment(**env)
    manage = [sys.executable, "manage.py"]
    subprocess.run(
        [*manage, "migrate", "--noinput"], cwd=ROOT, env=full_env, check=True, capture_output=True
    )
    created = subprocess.run(
        [*manage, "shell", "-c", CREATE_TOKEN],
        cwd=ROOT,
        env=full_env,
        check=True,
        capture_output=True,
        text=True,
    )
    port = free_port()
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    spy = [
        py_spy,
        "record",
        "--rate",
        str(rate),
        "--format",
        "raw",
        "--full-filenames",
        # Only the thread holding the GIL: py-spy's idle detection counts threads
        # asleep in a queue or in time.sleep as busy here.
        "--gil",
        "-o",
        str(folder / "profile.folded"),
        "--",
    ]
    command = [
        *(spy if profile else []),
        sys.executable,
        "-m",
        "uvicorn",
        "project.asgi:application",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--lifespan",
        "off",
    ]
    log = (folder / "server.log").open("wb")
    process = subprocess.Popen(command, cwd=ROOT, env=full_env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    import urllib.request

    while True:
        try:
            with urllib.request.urlopen(f"{base}/healthz/", timeout=2) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((folder / "server.log").read_text(errors="replace")[-3000:])
        time.sleep(0.1)
    server = {"http": base, "ws": base.replace("http", "ws", 1)}
    return process, {**server, "token": created.stdout.split()[-1]}


def stop_profiled(process: Any) -> None:
    """Stop uvicorn (py-spy's child) so that py-spy writes its samples and exits."""
    children = subprocess.run(
        ["pgrep", "-P", str(process.pid)], capture_output=True, text=True
    ).stdout.split()
    for child in children:
        os.kill(int(child), signal.SIGTERM)
    if not children:
        process.terminate()  # uvicorn itself (--no-profile)
    process.wait(60)


def short(file: str) -> str:
    """A frame's file relative to the repository or to site-packages."""
    for marker in ("site-packages/", str(ROOT) + "/"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file.rsplit("/lib/python3", 1)[-1] if "/lib/python3" in file else file


def profile_start(pid: int, folded: Path) -> subprocess.Popen:
    """py-spy recording the running web process (the thread holding the GIL)."""
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    command = [py_spy, "record", "--pid", str(pid), "--rate", "250", "--format", "raw"]
    command += ["--full-filenames", "--gil", "-o", str(folded.with_suffix(".part"))]
    folded.parent.mkdir(parents=True, exist_ok=True)  # bench/results/: none in a fresh clone
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def profile_stop(process: subprocess.Popen, folded: Path) -> None:
    """Stop py-spy (it writes its samples on SIGINT); add them to `folded`."""
    process.send_signal(signal.SIGINT)
    process.wait(60)
    with folded.open("a") as out:
        out.write(folded.with_suffix(".part").read_text())


def profile_print(title: str, profile: dict[str, Any]) -> None:
    """`summarize`'s figures of one process under `title`: self time, then ours inclusive."""
    print(f"\n{title}, {profile['samples']} samples holding the GIL; self time:")
    for name, share in profile["self_by_function"]:
        print(f"  {share:5.1f}%  {name}")
    print("  toolchat's functions, inclusive:")
    for name, share in profile["inclusive_ours"]:
        print(f"  {share:5.1f}%  {name}")


def summarize(folded: Path, top: int) -> dict[str, Any]:
    """Self time by module and by function, and inclusive time of our functions."""
    by_module: collections.Counter[str] = collections.Counter()
    by_function: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in folded.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        total += count
        frames = []
        for frame in stack.split(";"):
            match = FRAME.match(frame)
            if match is None:
                continue
            frames.append((match["function"], short(match["file"])))
        if not frames:
            continue
        function, file = frames[-1]
        by_module[file] += count
        by_function[f"{function} ({file})"] += count
        seen = set()
        for function, file in frames:
            key = f"{function} ({file})"
            if file.startswith(OURS) and key not in seen:
                seen.add(key)
                inclusive[key] += count

    def share(counter: collections.Counter[str]) -> list[tuple[str, float]]:
        return [(key, 100 * value / total) for key, value in counter.most_common(top)]

    return {
        "samples": total,
        "self_by_module": share(by_module),
        "self_by_function": share(by_function),
        "inclusive_ours": share(inclusive),
    }


def embedded_breakdown(folder: Path, run_ids: list[str]) -> dict[str, float]:
    """Where the REST turns' runs spent their time (p50 of each segment), from the SQLite file."""
    os.environ.update(
        {
            **EMBEDDED_ENV,
            "DJANGO_SETTINGS_MODULE": "project.settings.base",
            "DATABASE_URL": f"sqlite:///{folder / 'db.sqlite3'}",
        }
    )
    import django

    django.setup()
    from turn_overhead import breakdown

    values: dict[str, list[float]] = {}
    for run_id in run_ids:
        for step, value in breakdown(run_id).items():
            if value is not None:
                values.setdefault(step, []).append(value)
    return {step: percentile(found, 0.5) for step, found in values.items()}


def print_breakdown(segments: dict[str, float]) -> None:
    print("embedded two-pass run, where the time goes (p50 ms, from the database):")
    for step, value in segments.items():
        print(f"  {step:<56}{value:>9.1f}")


def inline_profile(turns: int) -> str:
    """pyinstrument's tree of `turns` two-pass turns run inline (one thread) on SQLite."""
    from pyinstrument import Profiler
    from stack import running_database

    settings_env = {**EMBEDDED_ENV, "DJANGO_SETTINGS_MODULE": "project.settings.base"}
    with running_database(backend="sqlite", responder=stepping_responder(), extra_env=settings_env):
        import logging

        from django.conf import settings
        from django.contrib.auth import get_user_model

        from chat.models import Conversation
        from chat.services.runs import run_start

        logging.disable(logging.INFO)
        settings.TOOLCHAT_TASKS_EAGER = True  # the run in this thread, inside run_start
        user = get_user_model().objects.create_user("bench", password="bench-password-1")
        profiler = Profiler(interval=0.0005)
        for number in range(turns + 3):
            conversation = Conversation.objects.create(owner=user, mode="two_pass")
            if number == 3:  # after the warm-up (imports, first connections)
                profiler.start()
            run_start(conversation=conversation, content=turn_content(1))
        profiler.stop()
    return str(profiler.output_text(unicode=False, color=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300, help="REST two-pass turns to post")
    parser.add_argument("--sockets", type=int, default=0, help="WebSocket turns to post after")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--no-profile", action="store_true", help="time the turns only, without py-spy"
    )
    parser.add_argument(
        "--inline",
        type=int,
        default=0,
        metavar="N",
        help="instead: N turns run inline in this process under pyinstrument (wall time)",
    )
    args = parser.parse_args()
    if args.inline:
        print(inline_profile(args.inline))
        return

    folder = Path(tempfile.mkdtemp(prefix="toolchat-profile-"))
    llm = ScriptedLLMServer(responder=stepping_responder()).start()
    try:
        process, server = start_profiled(llm, folder, args.rate, profile=not args.no_profile)
        client = Client("embedded", server, server["token"])
        content = turn_content(1)
        answer = " ".join(f"word{i}" for i in range(20))
        started = time.monotonic()
        times = [client.post_turn("two_pass", content, answer) for _ in range(args.turns)]
        times += [client.socket_turn(content)[1] for _ in range(args.sockets)]
        elapsed = time.monotonic() - started
        stop_profiled(process)
        segments = embedded_breakdown(folder, client.run_ids.get("two_pass", []))
        if args.no_profile:
            times.sort()
            print(f"{len(times)} turns: p50 {times[len(times) // 2]:.1f} ms in {elapsed:.1f} s")
            print_breakdown(segments)
            return
        summary = summarize(folder / "profile.folded", args.top)
        results_folder = ROOT / "bench" / "results"
        results_folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(folder / "profile.folded", results_folder / "profile_turn.folded")
    finally:
        llm.stop()
    times.sort()
    print(
        f"{args.turns} REST turns and {args.sockets} WebSocket turns in {elapsed:.1f} s "
        f"(REST p50 {times[len(times) // 2]:.1f} ms); {summary['samples']} samples at "
        f"{args.rate}/s"
    )
    print_breakdown(segments)
    for title, key in (
        ("self, by module", "self_by_module"),
        ("self, by function", "self_by_function"),
        ("total (anywhere on the stack), our functions", "inclusive_ours"),
    ):
        print(f"\n{title} (% of samples)")
        for name, percent in summary[key]:
            print(f"  {percent:5.1f}  {name}")
    write_results(
        "profile_turn",
        {
            "turns": args.turns,
            "sockets": args.sockets,
            "seconds": elapsed,
            "breakdown_p50_ms": segments,
            **summary,
        },
    )
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
