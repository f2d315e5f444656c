"""What toolchat adds to an MCP tool call, beside the bare MCP SDK.

Starts the MCPServer test server (tests/tools/mcp/server.py) over stdio and over
streamable HTTP, and calls its `add` tool N times, interleaved, two ways:

- **bare SDK**: one `ClientSession` held open in an asyncio loop, `call_tool`
  awaited; nothing checked, nothing stored. The floor.
- **toolchat**: the tool as the turn engine runs it, `execute_tool` with the
  registry's MCP source (tools/mcp/hub.py): arguments checked against the
  schema, the call run on the executor's thread with a deadline, the loop hop
  to the hub, the result converted and measured for truncation.

Also the cold start: from the first `specs()` to the server listed.

    .venv/bin/python bench/mcp_calls.py [--calls 300]

Prints a table and writes bench/results/mcp_calls.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from contextlib import AsyncExitStack
from typing import Any

from stack import ROOT, percentile, write_results

from tests.plugins.services import free_port
from tests.tools.mcp.servers import SERVER, HttpServer


async def bare_calls(entry: dict[str, Any], calls: int) -> list[float]:
    """Open a ClientSession, call `add` `calls` times; the time of each call, in ms."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    async with AsyncExitStack() as stack:
        if "command" in entry:
            read, write = await stack.enter_async_context(
                stdio_client(StdioServerParameters(command=entry["command"], args=entry["args"]))
            )
        else:
            read, write = await stack.enter_async_context(streamable_http_client(entry["url"]))
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        timings = []
        for _ in range(calls):
            began = time.perf_counter()
            result = await session.call_tool("add", {"a": 2, "b": 3})
            timings.append((time.perf_counter() - began) * 1000)
            assert result.content[0].text == "5"  # type: ignore[union-attr]
        return timings


def measure(transport: str, entry: dict[str, Any], calls: int) -> list[dict[str, Any]]:
    from tools.context import ToolContext
    from tools.executor import execute_tool
    from tools.mcp.config import parse_config
    from tools.mcp.hub import McpHub
    from tools.registry import ToolRegistry

    hub = McpHub(parse_config({"mcpServers": {"b": entry}}, environ=os.environ))
    registry = ToolRegistry()
    registry.add_source(hub)
    started = time.perf_counter()
    names = [spec.name for spec in registry.specs()]
    cold_ms = (time.perf_counter() - started) * 1000
    assert "b__add" in names, names

    timings: dict[str, list[float]] = {"bare SDK": [], "toolchat": []}
    rounds = 3
    for round_ in range(rounds):  # alternating blocks, so that drift hits both alike
        timings["bare SDK"] += asyncio.run(bare_calls(entry, calls // rounds + 10))[10:]
        for index in range(calls // rounds + 10):
            began = time.perf_counter()
            result = execute_tool(
                name="b__add",
                arguments='{"a": 2, "b": 3}',
                context=ToolContext(user=None, tool_call_id=f"call_{round_}_{index}"),
                registry=registry,
            )
            ours_ms = (time.perf_counter() - began) * 1000
            assert result.content == "5", result.content
            if index >= 10:  # warm-up
                timings["toolchat"].append(ours_ms)
    hub.close()
    rows = []
    for variant, values in timings.items():
        rows.append(
            {
                "transport": transport,
                "variant": variant,
                "calls": len(values),
                "p50_ms": round(percentile(values, 0.5), 2),
                "p95_ms": round(percentile(values, 0.95), 2),
                "mean_ms": round(sum(values) / len(values), 2),
                "cold_start_ms": round(cold_ms, 1) if variant == "toolchat" else None,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    options = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings.test")
    import django

    django.setup()
    import logging

    logging.disable(logging.INFO)

    rows = measure("stdio", {"command": sys.executable, "args": [str(SERVER)]}, options.calls)
    server = HttpServer(port=free_port())
    server.start()
    try:
        rows += measure("http", {"url": server.url}, options.calls)
    finally:
        server.kill()

    print(f"{'transport':<10}{'variant':<11}{'p50 ms':>9}{'p95 ms':>9}{'mean ms':>9}{'cold ms':>9}")
    for row in rows:
        cold = f"{row['cold_start_ms']:.0f}" if row["cold_start_ms"] is not None else ""
        print(
            f"{row['transport']:<10}{row['variant']:<11}{row['p50_ms']:>9.2f}"
            f"{row['p95_ms']:>9.2f}{row['mean_ms']:>9.2f}{cold:>9}"
        )
    for transport in ("stdio", "http"):
        bare, ours = (r for r in rows if r["transport"] == transport)
        print(
            f"{transport}: toolchat adds {ours['p50_ms'] - bare['p50_ms']:.2f} ms at p50 "
            f"({ours['p50_ms'] / bare['p50_ms']:.2f}x the bare SDK call)"
        )
    path = write_results(
        "mcp_calls",
        {"machine": platform.platform(), "cpus": os.cpu_count(), "rows": rows},
    )
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
