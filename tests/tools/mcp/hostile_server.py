"""An MCP server over stdio that misbehaves on purpose, written as raw JSON-RPC lines.

    python tests/tools/mcp/hostile_server.py MODE

MODE is one of:
- hang-init: never answers `initialize`.
- hang-list: answers `initialize`, never `tools/list`.
- endless-pages: every `tools/list` page points to a next one.
- crowded: lists 150 tools, one with a 20,000-character description, one
  whose property schema is `true`, one whose schema `$ref`s itself in a loop.
"""

from __future__ import annotations

import json
import sys


def tools_page(mode: str, cursor: str | None) -> dict:
    if mode == "endless-pages":
        page = int(cursor or 0)
        return {
            "tools": [{"name": f"t{page}", "inputSchema": {"type": "object"}}],
            "nextCursor": str(page + 1),
        }
    tools = [
        {
            "name": f"tool{index}",
            "description": f"Tool number {index}.",
            "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
        }
        for index in range(150)
    ]
    tools[0] = {
        "name": "wordy",
        "description": "word " * 4_000,
        "inputSchema": {"type": "object", "properties": {}},
    }
    tools[1] = {
        "name": "anything",
        "description": "Search the issues for anything.",
        "inputSchema": {"type": "object", "properties": {"query": True}},
    }
    tools[2] = {
        "name": "loop",
        "description": "A schema that refers to itself forever.",
        "inputSchema": {
            "type": "object",
            "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
            "properties": {"x": {"$ref": "#/$defs/a"}},
        },
    }
    return {"tools": tools}


def main() -> None:
    mode = sys.argv[1]
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:
            continue  # a notification
        method = message.get("method")
        if method == "initialize":
            if mode == "hang-init":
                continue
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"},
            }
        elif method == "tools/list":
            if mode == "hang-list":
                continue
            result = tools_page(mode, (message.get("params") or {}).get("cursor"))
        elif method == "ping":
            result = {}
        else:
            error = {"code": -32601, "message": f"no method {method}"}
            print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}), flush=True)
            continue
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)


if __name__ == "__main__":
    main()
