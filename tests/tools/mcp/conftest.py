"""Fixtures that offer MCP servers' tools for one test, and start the HTTP test server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.plugins.services import free_port
from tests.tools.mcp.servers import HttpServer
from tools import mcp
from tools.mcp.config import parse_config
from tools.mcp.hub import McpHub


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


@pytest.fixture
def mcp_http_server() -> Iterator[HttpServer]:
    """The test server over streamable HTTP, in its own process."""
    server = HttpServer(port=free_port())
    server.start()
    yield server
    server.kill()
