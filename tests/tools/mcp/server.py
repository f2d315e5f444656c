"""A small MCP server for the tests, written with the SDK's MCPServer.

    python tests/tools/mcp/server.py                 # over stdio
    python tests/tools/mcp/server.py --http PORT     # over streamable HTTP at /mcp

Its tools cover what a client must survive: progress, an error result, a
slow call (and whether it was cancelled), a crash mid-call, structured
content, an image, a schema the model API refuses, and a name OpenAI does
not allow.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
import time

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

# A 1x1 PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

server = MCPServer("toolchat-test", log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def whoami() -> str:
    """The server's process id (tells a reused server from a restarted one)."""
    return str(os.getpid())


@server.tool()
async def count(steps: int, ctx: Context) -> str:
    """Count to `steps`, reporting progress at each step."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step} of {steps}")
        await asyncio.sleep(0.05)
    return f"counted to {steps}"


@server.tool()
def traceparent(ctx: Context) -> str:
    """The W3C traceparent the call carried in its `_meta`, or "none"."""
    meta = ctx.request_context.meta or {}
    return str(meta.get("traceparent") or "none")


@server.tool()
def refuse(reason: str) -> str:
    """Always fails, saying why."""
    raise ToolError(f"refused: {reason}")


# The calls of `sleep` the client cancelled, as "sleep <seconds>".
CANCELLED: list[str] = []


@server.tool()
async def sleep(seconds: float, ctx: Context) -> str:
    """Sleep, then say so (a first progress report says the call has arrived)."""
    await ctx.report_progress(0, seconds, "sleeping")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        CANCELLED.append(f"sleep {seconds:g}")
        raise
    return f"slept {seconds} s"


@server.tool()
async def cancelled() -> str:
    """The calls of `sleep` the client cancelled (waiting up to 2 s for a first one)."""
    deadline = time.monotonic() + 2
    while not CANCELLED and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return ", ".join(CANCELLED) or "none"


@server.tool()
async def crash(after: float = 0.2) -> str:
    """The server process exits in the middle of this call."""
    await asyncio.sleep(after)
    os._exit(3)


class Forecast(BaseModel):
    city: str
    temperature_c: float
    sky: str


@server.tool()
def forecast(city: str) -> Forecast:
    """Tomorrow's weather in a city (structured content)."""
    return Forecast(city=city, temperature_c=21.5, sky="clear")


@server.tool()
def picture() -> Image:
    """A tiny picture."""
    return Image(data=PIXEL, format="png")


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds a tool called `grown` and tells the client its tool list changed."""

    def grown() -> str:
        """A tool that was not there at first."""
        return "grown"

    server.add_tool(grown)
    await ctx.session.send_tool_list_changed()
    return "grew"


@server.tool(name="files.read")
def files_read(path: str) -> str:
    """A tool whose name has a dot, which OpenAI function names may not."""
    return f"contents of {path}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, help="serve streamable HTTP on this port")
    options = parser.parse_args()
    if options.http:
        server.run("streamable-http", port=options.http)
    else:
        server.run("stdio")


if __name__ == "__main__":
    sys.exit(main())
