"""Servers that hang, page forever, list too much, or refuse us: turns go on, secrets stay hidden."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from chat.llm.offline.choosing import tool_pick
from tests.stack import ROOT
from tools.mcp.config import parse_config
from tools.mcp.hub import McpHub
from tools.mcp.specs import MAX_DESCRIPTION_CHARS, MAX_TOOLS_PER_SERVER
from tools.registry import ToolRegistry

HOSTILE = ROOT / "tests" / "tools" / "mcp" / "hostile_server.py"


def hub_of(servers: dict, **options) -> McpHub:
    return McpHub(
        parse_config({"mcpServers": servers}, environ={**os.environ, "TOK": "s3cr3t-token"}),
        **{"connect_timeout": 1.0, "retry_s": 3600.0, **options},
    )


def hostile(mode: str) -> dict:
    return {"command": sys.executable, "args": [str(HOSTILE), mode]}


@pytest.fixture
def hubs():
    made: list[McpHub] = []

    def make(servers: dict, **options) -> McpHub:
        hub = hub_of(servers, **options)
        made.append(hub)
        return hub

    yield make
    for hub in made:
        hub.close()


@pytest.mark.parametrize("mode", ["hang-init", "hang-list", "endless-pages"])
def test_a_server_that_never_finishes_listing_costs_one_bounded_wait(hubs, mode):
    hub = hubs({"bad": hostile(mode)})
    registry = ToolRegistry()
    registry.add_source(hub)

    started = time.monotonic()
    assert [s for s in registry.specs() if s.server] == []
    first = time.monotonic() - started
    assert first < 4.0, f"the first listing waited {first:.1f} s"

    # Later turns do not wait again: the failure is remembered and retried in the background.
    started = time.monotonic()
    registry.specs()
    assert time.monotonic() - started < 0.2
    (status,) = hub.status()
    assert status["state"] == "error"
    assert status["error"]


def test_a_crowded_server_is_cut_to_size_and_bad_schemas_are_left_out(hubs):
    hub = hubs({"crowd": hostile("crowded")})
    specs = {spec.name: spec for spec in hub.specs()}
    assert len(specs) == MAX_TOOLS_PER_SERVER
    assert len(specs["crowd__wordy"].description) == MAX_DESCRIPTION_CHARS
    (status,) = hub.status()
    assert "cannot be checked" in status["skipped"]["loop"]
    assert "allowTools" in status["skipped"]["tool149"]
    assert "crowd__loop" not in specs


def test_the_offline_model_reads_a_schema_whose_property_is_true(hubs):
    hub = hubs({"crowd": hostile("crowded")})
    tools = [spec.openai_tool() for spec in hub.specs() if spec.name == "crowd__anything"]
    pick = tool_pick("search the issues for anything", tools)
    assert pick is not None
    assert pick.name == "crowd__anything"


class _Refuse(BaseHTTPRequestHandler):
    def do_POST(self):
        self.send_response(401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_refused_http_server_never_shows_its_token(hubs, caplog):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    hub = hubs(
        {
            "tracker": {
                "url": f"http://user:${{TOK}}@127.0.0.1:{port}/mcp?token=${{TOK}}",
                "headers": {"Authorization": "Bearer ${TOK}"},
            }
        }
    )
    try:
        with caplog.at_level(logging.INFO):
            assert hub.specs() == []
    finally:
        server.shutdown()
    (status,) = hub.status()
    assert "401" in status["error"]
    shown = " ".join([status["error"], status["where"], caplog.text])
    assert "s3cr3t-token" not in shown
    assert status["where"] == f"http://127.0.0.1:{port}/mcp"
