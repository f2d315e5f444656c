"""The CPU of reading one streamed answer: toolchat's provider beside the SDK's typed stream.

A streamed answer is one chunk per token, and a worker reads every chunk of
every answer with the GIL held: what a chunk costs decides how many answers
one worker process streams at once. Against the scripted model on loopback
(in a thread of this process, not counted), each variant reads answers of
20 and 500 words, in turn:

- **SDK, typed**: `client.chat.completions.create(stream=True)` iterated, as
  the bare loop reads it (the SDK builds a `ChatCompletionChunk` model per chunk);
- **toolchat**: `OpenAIProvider.stream`, the whole model call as a run makes
  it: the request body, the SDK's request and SSE reading, the chunks read as
  the JSON objects the server sent (chat/llm/stream_read.py), the answer
  assembled and checked.

The figure is the reading thread's CPU time (`time.thread_time`), p50 over
the rounds, with the wall time beside it.

    .venv/bin/python bench/stream_cpu.py [--rounds 20] [--words 20,500]

Prints a table and writes bench/results/stream_cpu.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings.test")

import django  # noqa: E402

django.setup()

import openai  # noqa: E402
from stack import percentile, write_results  # noqa: E402

from chat.llm.base import ChatRequest, Done  # noqa: E402
from chat.llm.openai_provider import OpenAIProvider  # noqa: E402
from tests.llm_server import ScriptedLLMServer, text_reply  # noqa: E402

MESSAGES = [{"role": "user", "content": "Tell me a long story."}]


def sdk_typed(client: openai.OpenAI) -> str:
    parts = []
    for chunk in client.chat.completions.create(model="m", messages=MESSAGES, stream=True):
        for choice in chunk.choices:
            parts.append(choice.delta.content or "")
    return "".join(parts)


def toolchat(provider: OpenAIProvider) -> str:
    for event in provider.stream(ChatRequest(model="m", messages=MESSAGES)):
        if isinstance(event, Done):
            return event.completion.content or ""
    raise RuntimeError("the stream ended without its answer")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--words", default="20,500", help="answer lengths, in words (chunks)")
    args = parser.parse_args()
    lengths = [int(value) for value in args.words.split(",")]

    server = ScriptedLLMServer().start()
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-bench", max_retries=0)
    provider = OpenAIProvider(api_key="sk-bench", base_url=server.base_url, max_retries=0)
    variants = {"SDK, typed": lambda: sdk_typed(client), "toolchat": lambda: toolchat(provider)}
    samples: dict[str, dict[int, dict[str, list[float]]]] = {
        name: {n: {"cpu": [], "wall": []} for n in lengths} for name in variants
    }
    try:
        for number in range(args.rounds + 2):  # two untimed rounds first
            for words in lengths:
                answer = " ".join(f"w{i}" for i in range(words))
                for name, read in variants.items():
                    server.push(text_reply(answer))
                    cpu, wall = time.thread_time(), time.perf_counter()
                    got = read()
                    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
                    if got != answer:
                        raise RuntimeError(f"{name} read {got[:60]!r}, not the answer")
                    if number >= 2:
                        samples[name][words]["cpu"].append(cpu * 1000)
                        samples[name][words]["wall"].append(wall * 1000)
    finally:
        server.stop()

    print(f"one streamed answer read, {args.rounds} rounds, p50 ms (the reading thread's CPU)")
    print(f"{'variant':<14}" + "".join(f"{f'{n} words CPU':>16}{'wall':>8}" for n in lengths))
    figures: dict[str, Any] = {}
    for name in variants:
        row = f"{name:<14}"
        figures[name] = {}
        for words in lengths:
            cpu = percentile(samples[name][words]["cpu"], 0.5)
            wall = percentile(samples[name][words]["wall"], 0.5)
            figures[name][words] = {"cpu_ms_p50": cpu, "wall_ms_p50": wall}
            row += f"{cpu:>16.2f}{wall:>8.2f}"
        print(row)
    for words in lengths:
        typed, ours = (figures[name][words]["cpu_ms_p50"] for name in variants)
        print(
            f"{words} words: toolchat's whole call takes {ours / typed:.2f}x the typed read's CPU"
        )
    path = write_results(
        "stream_cpu", {"rounds": args.rounds, "figures": figures, "samples_ms": samples}
    )
    print(f"written to {path}")


if __name__ == "__main__":
    main()
