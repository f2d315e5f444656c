"""The MCP servers the tests and benchmarks start: the MCPServer one of server.py, and mcp-server-time."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from tests.stack import ROOT

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


@dataclass
class HttpServer:
    """The test server over streamable HTTP, in its own process (`start()` starts it)."""

    port: int
    process: subprocess.Popen[bytes] | None = None

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
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
