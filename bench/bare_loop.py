"""The bare loop: a tool-calling turn hand-rolled on the `openai` SDK, with nothing stored.

The yardstick for toolchat's overhead (DESIGN.md section 9): the same SDK calls
to the same scripted model server, the same tool function, and nothing else.
A two-pass turn is a streaming `chat.completions` call with the app's tools
offered (`tools.registry.registry.openai_tools()`), the tool call assembled
from the stream, the calculator run as a plain Python function, and a second
streaming call without tools whose text is read to the end. A loop turn keeps
offering the tools until the model answers without calling one. One
`openai.OpenAI` client is reused across turns, as a hand-rolled loop would.

Per turn it measures the total wall time, the time from the start of the turn
to the first text chunk of the answer call (time to first token), and each
step (every model call and every tool call).

    .venv/bin/python bench/bare_loop.py [--turns 200] [--steps 1] [--mode two_pass|loop]

Prints a table and writes bench/results/bare_loop.json. `bench/compare.py`
imports `bare_turn` and runs it beside the app, interleaved.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import openai
from stack import STEPS_MARK, ScriptedLLMServer, percentile, stepping_responder, write_results

from chat.llm.tool_bounds import tools_for_model
from tools.builtin.calculator import calculator
from tools.registry import load_tool_modules, registry

# The tool modules of project/settings/toolchat.py (TOOLCHAT_TOOL_MODULES' default),
# so that the bare loop offers the model what the app offers it.
BUILTIN_TOOL_MODULES = [
    "tools.builtin.calculator",
    "tools.builtin.current_time",
    "tools.builtin.notes",
    "tools.builtin.dataset",
]
# What the app sends on its composing call (LLM_COMPOSE_MAX_TOKENS, LLM_COMPOSE_TEMPERATURE).
COMPOSE_ARGUMENTS: dict[str, Any] = {"max_completion_tokens": 600, "temperature": 0.7}
# The tools the bare loop can run: the project's functions, called directly (the
# calculator ignores its context, so None stands in for it).
TOOL_FUNCTIONS: dict[str, Callable[..., Any]] = {"calculator": calculator}


@dataclass
class BareTurn:
    """One turn's figures, in milliseconds from the start of the turn."""

    total_ms: float
    first_token_ms: float | None  # first text chunk of the answer call
    steps: dict[str, float] = field(default_factory=dict)
    model_calls: int = 0
    answer: str = ""


def offered_tools() -> list[dict[str, Any]]:
    """The `tools` parameter the app sends: every registered tool, as the registry writes it,
    with its large bounds in words (chat/llm/limits.py), as the provider sends them."""
    load_tool_modules(BUILTIN_TOOL_MODULES)  # already imported under Django: a no-op
    return tools_for_model(registry.openai_tools())


def make_client(base_url: str, api_key: str = "sk-bench") -> openai.OpenAI:
    """One client (one connection pool) for every turn, with the app's timeout and retries."""
    return openai.OpenAI(
        api_key=api_key,
        base_url=base_url,
        timeout=openai.Timeout(60.0, connect=10.0),
        max_retries=3,
    )


def _stream(
    client: openai.OpenAI,
    *,
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    started: float,
) -> tuple[str, list[dict[str, Any]], float | None]:
    """One streaming call: its text, its assembled tool calls, and when its first text came."""
    extra: dict[str, Any] = {"tools": tools, "tool_choice": "auto"} if tools else COMPOSE_ARGUMENTS
    chunks = client.chat.completions.create(
        model=model,
        messages=messages,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
        **extra,
    )
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    first_text: float | None = None
    with chunks:
        for chunk in chunks:
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    if first_text is None:
                        first_text = (time.perf_counter() - started) * 1000
                    text.append(delta.content)
                for piece in delta.tool_calls or []:
                    call = calls.setdefault(
                        piece.index,
                        {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                    )
                    if piece.id:
                        call["id"] = piece.id
                    if piece.function and piece.function.name:
                        call["function"]["name"] += piece.function.name
                    if piece.function and piece.function.arguments:
                        call["function"]["arguments"] += piece.function.arguments
    return "".join(text), [calls[index] for index in sorted(calls)], first_text


def bare_turn(
    client: openai.OpenAI,
    *,
    tools: list[dict[str, Any]],
    content: str,
    model: str = "bench-model",
    mode: str = "two_pass",
    max_steps: int = 5,
    history: list[dict[str, Any]] | None = None,
) -> BareTurn:
    """Run one turn: model with tools, tool calls, then the answer (`two_pass` or `loop`).

    `history`: the messages before the user's, as a loop that keeps its conversation sends them.
    """
    started = time.perf_counter()
    messages: list[dict[str, Any]] = [*(history or []), {"role": "user", "content": content}]
    steps: dict[str, float] = {}
    tool_steps = calls_made = 0
    while True:
        offer = tools if tool_steps == 0 or (mode == "loop" and tool_steps < max_steps) else None
        call_started = time.perf_counter()
        text, tool_calls, first_text = _stream(
            client, model=model, messages=messages, tools=offer, started=started
        )
        calls_made += 1
        label = f"model call {calls_made} ({'tools' if offer else 'no tools'})"
        steps[label] = (time.perf_counter() - call_started) * 1000
        if not tool_calls:
            break
        messages.append({"role": "assistant", "content": text or None, "tool_calls": tool_calls})
        tool_steps += 1
        for call in tool_calls:
            tool_started = time.perf_counter()
            function = TOOL_FUNCTIONS[call["function"]["name"]]
            result = function(None, **json.loads(call["function"]["arguments"]))
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
            )
            steps[f"tool call {tool_steps} ({call['function']['name']})"] = (
                time.perf_counter() - tool_started
            ) * 1000
    return BareTurn(
        total_ms=(time.perf_counter() - started) * 1000,
        first_token_ms=first_text,
        steps=steps,
        model_calls=calls_made,
        answer=text,
    )


def turn_content(steps: int) -> str:
    """The user message that makes the stepping model call the calculator `steps` times."""
    return f"{STEPS_MARK}{steps} what is 12*7?" if steps != 1 else "what is 12*7?"


def summarize(turns: list[BareTurn]) -> dict[str, dict[str, float]]:
    """p50 and p95 of the total, the time to first token and each step."""
    series: dict[str, list[float]] = {"total": [turn.total_ms for turn in turns]}
    series["first token (answer call)"] = [
        turn.first_token_ms for turn in turns if turn.first_token_ms is not None
    ]
    for turn in turns:
        for step, value in turn.steps.items():
            series.setdefault(f"  {step}", []).append(value)
    return {
        name: {
            "n": len(values),
            "p50_ms": percentile(values, 0.5),
            "p95_ms": percentile(values, 0.95),
            "max_ms": max(values),
        }
        for name, values in series.items()
        if values
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=200, help="timed turns")
    parser.add_argument("--warmup", type=int, default=5, help="untimed turns first")
    parser.add_argument("--steps", type=int, default=1, help="calculator calls per turn")
    parser.add_argument("--mode", choices=["two_pass", "loop"], default="two_pass")
    args = parser.parse_args()
    if args.mode == "two_pass" and args.steps != 1:
        parser.error("a two_pass turn makes one tool step: use --mode loop for more")

    llm = ScriptedLLMServer(responder=stepping_responder()).start()
    try:
        client = make_client(llm.base_url)
        tools = offered_tools()
        content = turn_content(args.steps)
        for _ in range(args.warmup):
            bare_turn(client, tools=tools, content=content, mode=args.mode)
        turns = [
            bare_turn(client, tools=tools, content=content, mode=args.mode)
            for _ in range(args.turns)
        ]
    finally:
        llm.stop()

    summary = summarize(turns)
    print(
        f"bare loop, {args.mode} turn with {args.steps} tool step(s), zero-latency model "
        f"({args.turns} turns)"
    )
    print(f"{'measure':<36}{'n':>5}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}")
    for name, row in summary.items():
        print(
            f"{name:<36}{row['n']:>5}{row['p50_ms']:>10.2f}{row['p95_ms']:>10.2f}"
            f"{row['max_ms']:>10.2f}"
        )
    path = write_results(
        "bare_loop",
        {
            "turns": args.turns,
            "mode": args.mode,
            "steps": args.steps,
            "machine": platform.platform(),
            "tools_offered": [tool["function"]["name"] for tool in tools],
            "summary": summary,
        },
    )
    print(f"written to {path}")


if __name__ == "__main__":
    main()
