"""Real MCP servers for the tests: the FastMCP one of server.py and mcp-server-time from PyPI."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.plugins.services import free_port
from tests.stack import ROOT
from tools import mcp
from tools.mcp.config import parse_config
from tools.mcp.hub import McpHub

SERVER = ROOT / "tests" / "tools" / "mcp" / "server.py"


def stdio_server(**options: Any) -> dict[str, Any]:
    """The test server over stdio, as an `mcpServers` entry."""
    return {"command": sys.executable, "args": [str(SERVER)], **options}


def time_server(**options: Any) -> dict[str, Any]:
    """mcp-server-time (the published package) over stdio."""
    return {
        "command": sys.executable,
        "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
        **options,
    }


@pytest.fixture
def mcp_servers() -> Iterator[Any]:
    """Offer these MCP servers' tools in the app's registry for one test."""

    def configure(servers: dict[str, dict[str, Any]], **options: Any) -> McpHub:
        hub = mcp.configure(
            parse_config({"mcpServers": servers}, environ=os.environ),
            **{"connect_timeout": 20.0, **options},
        )
        assert hub is not None
        return hub

    yield configure
    mcp.unconfigure()


@dataclass
class HttpServer:
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER), "--http", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the MCP test server did not start listening")

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)


@pytest.fixture
def mcp_http_server() -> Iterator[HttpServer]:
    """The test server over streamable HTTP, in its own process."""
    server = HttpServer(port=free_port(), process=None)  # type: ignore[arg-type]
    server.start()
    yield server
    server.kill()
