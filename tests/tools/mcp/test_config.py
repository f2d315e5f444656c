"""TOOLCHAT_MCP_CONFIG: the mcpServers file is read, checked and filled in; mistakes name the server."""

from __future__ import annotations

import json
import math

import pytest
from django.core.exceptions import ImproperlyConfigured

from tools.mcp.config import McpServerConfig, load_config, parse_config
from tools.spec import DEFAULT_TIMEOUT_S

SECRET = "s3cr3t-value-never-shown"


def servers(environ=None, **entries) -> list[McpServerConfig]:
    return parse_config({"mcpServers": entries}, environ=environ or {})


def one(entry: dict, name: str = "files", environ=None) -> McpServerConfig:
    [server] = servers(environ, **{name: entry})
    return server


def refused(entry, name: str = "files", environ=None) -> str:
    """The message of the ImproperlyConfigured a server entry gives."""
    with pytest.raises(ImproperlyConfigured) as info:
        parse_config({"mcpServers": {name: entry}}, environ=environ or {})
    return str(info.value)


# --- Valid servers ---------------------------------------------------------------------


def test_a_stdio_server_is_read_with_its_command_args_env_and_cwd():
    server = one(
        {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", "/data"],
            "env": {"LOG_LEVEL": "debug"},
            "cwd": "/srv",
        }
    )
    assert server == McpServerConfig(
        name="files",
        transport="stdio",
        command="npx",
        args=("-y", "@modelcontextprotocol/server-filesystem", "/data"),
        env={"LOG_LEVEL": "debug"},
        cwd="/srv",
        written="npx -y @modelcontextprotocol/server-filesystem /data",
    )
    assert server.enabled is True
    assert server.allow_tools is None
    assert server.requires_approval is False
    assert server.timeout == DEFAULT_TIMEOUT_S


def test_an_http_server_is_read_with_its_url_headers_and_toolchat_options():
    server = one(
        {
            "type": "streamable-http",
            "url": "https://mcp.example.com/mcp",
            "headers": {"X-Team": "blue"},
            "allowTools": ["search", "fetch"],
            "requiresApproval": ["fetch"],
            "timeout": 12,
            "enabled": False,
        },
        name="web_search-2",
    )
    assert server.name == "web_search-2"
    assert server.transport == "http"
    assert server.url == "https://mcp.example.com/mcp"
    assert dict(server.headers) == {"X-Team": "blue"}
    assert server.command == ""
    assert server.allow_tools == frozenset({"search", "fetch"})
    assert server.requires_approval == frozenset({"fetch"})
    assert server.timeout == 12.0
    assert isinstance(server.timeout, float)
    assert server.enabled is False


def test_servers_come_back_in_file_order():
    listed = servers(b={"command": "b"}, a={"url": "http://localhost:1/mcp"}, c={"command": "c"})
    assert [(s.name, s.transport) for s in listed] == [
        ("b", "stdio"),
        ("a", "http"),
        ("c", "stdio"),
    ]


def test_keys_other_clients_write_are_accepted():
    server = one(
        {
            "type": "stdio",
            "command": "uvx",
            "description": "Shared with Claude Desktop",
            "autoApprove": ["read"],
            "disabled": False,
        }
    )
    assert server.transport == "stdio"
    assert server.enabled is True
    assert server.requires_approval is False  # autoApprove is another client's, not ours


def test_disabled_true_from_other_clients_turns_the_server_off():
    assert one({"command": "uvx", "disabled": True}).enabled is False


# --- ${VARIABLES} ----------------------------------------------------------------------


def test_variables_are_filled_in_env_headers_url_and_args():
    environ = {"TOKEN": SECRET, "HOST": "mcp.example.com", "ROOT": "/data"}
    stdio = one(
        {"command": "server", "args": ["--root", "${ROOT}/files"], "env": {"API_KEY": "${TOKEN}"}},
        environ=environ,
    )
    assert stdio.args == ("--root", "/data/files")
    assert dict(stdio.env) == {"API_KEY": SECRET}
    http = one(
        {"url": "https://${HOST}/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}},
        environ=environ,
    )
    assert http.url == "https://mcp.example.com/mcp"
    assert dict(http.headers) == {"Authorization": f"Bearer {SECRET}"}


def test_variables_come_from_the_environ_given_not_the_process(monkeypatch):
    monkeypatch.setenv("TOKEN", "from-the-process")
    server = one({"command": "server", "env": {"KEY": "${TOKEN}"}}, environ={"TOKEN": "given"})
    assert dict(server.env) == {"KEY": "given"}


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ({"command": "server", "env": {"API_KEY": "${MISSING_TOKEN}"}}, "env.API_KEY"),
        ({"url": "http://localhost/mcp", "headers": {"Auth": "${MISSING_TOKEN}"}}, "headers.Auth"),
        ({"url": "https://${MISSING_TOKEN}/mcp"}, "url"),
        ({"command": "server", "args": ["--key", "${MISSING_TOKEN}"]}, "args"),
    ],
)
def test_a_missing_variable_names_it_the_server_and_the_key_but_no_secret(entry, key):
    # Another variable of the same entry is set: its value must not leak into the message.
    entry = {**entry, "env": {**entry.get("env", {}), "OTHER": "${TOKEN}"}}
    message = refused(entry, name="vault", environ={"TOKEN": SECRET})
    assert "MISSING_TOKEN" in message
    assert "'vault'" in message
    assert key in message
    assert SECRET not in message


# --- Mistakes --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["my__server", "x" * 33, "", "my server", "_lead", "trail_"])
def test_a_bad_server_name_is_refused(name):
    message = refused({"command": "server"}, name=name)
    assert repr(name) in message
    assert "'__'" in message  # the reason is given


def test_a_name_of_exactly_32_characters_is_accepted():
    assert one({"command": "server"}, name="a" * 32).name == "a" * 32


@pytest.mark.parametrize(
    "entry", [{"command": "server", "url": "http://localhost/mcp"}, {"args": ["x"]}, {}]
)
def test_a_server_needs_exactly_one_of_command_and_url(entry):
    message = refused(entry)
    assert "'files'" in message
    assert "`command`" in message
    assert "`url`" in message


@pytest.mark.parametrize(
    "entry",
    [
        {"type": "sse", "url": "http://localhost/mcp/sse"},
        {"transport": "sse", "url": "http://localhost/sse"},
        {"type": "http", "command": "server"},
    ],
)
def test_a_transport_type_that_does_not_match_is_refused(entry):
    message = refused(entry)
    assert "'files'" in message
    assert repr(entry.get("type", entry.get("transport"))) in message
    assert "streamable HTTP" in message


def test_an_unknown_key_is_refused_and_the_known_ones_listed():
    message = refused({"command": "server", "enviroment": {}, "alowTools": []})
    assert "'files'" in message
    assert "alowTools, enviroment" in message
    assert "allowTools" in message  # the keys that exist are listed


def test_an_entry_that_is_not_an_object_is_refused():
    assert "'files'" in refused(["npx", "server"])


def test_a_document_without_mcp_servers_is_refused():
    for document in ({"servers": {}}, [], {"mcpServers": []}):
        with pytest.raises(ImproperlyConfigured, match="mcpServers"):
            parse_config(document, environ={})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("command", ""),
        ("command", 42),
        ("args", "--root /data"),
        ("args", ["--port", 8080]),
        ("env", ["A=1"]),
        ("env", {"PORT": 8080}),
        ("cwd", 3),
        ("allowTools", "search"),
        ("allowTools", [1]),
        ("requiresApproval", "yes"),
        ("requiresApproval", [True]),
        ("timeout", True),
        ("timeout", "30"),
        ("timeout", -1),
        ("timeout", 0),
        ("timeout", math.inf),
        ("timeout", math.nan),
        ("enabled", "true"),
        ("enabled", 1),
    ],
)
def test_a_stdio_option_of_the_wrong_type_names_the_server_and_the_key(key, value):
    entry = {"command": "server", key: value}
    message = refused(entry)
    assert "'files'" in message
    assert key in message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("url", "ftp://example.com/mcp"),
        ("url", "localhost:8080/mcp"),
        ("url", "http:///mcp"),
        ("url", 8080),
        ("headers", {"X-Port": 1}),
        ("headers", "Authorization: Bearer x"),
    ],
)
def test_an_http_option_of_the_wrong_type_names_the_server_and_the_key(key, value):
    entry = {"url": "https://mcp.example.com/mcp", key: value}
    message = refused(entry)
    assert "'files'" in message
    assert key in message


def test_a_rejected_url_is_not_repeated_in_the_message():
    message = refused({"url": "ftp://user:${TOKEN}@example.com/"}, environ={"TOKEN": SECRET})
    assert "url must be an http://" in message
    assert SECRET not in message


# --- load_config ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["", None])
def test_no_file_means_no_servers(path):
    assert load_config(path) == []


def test_a_file_is_read_with_variables_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLCHAT_TEST_MCP_TOKEN", SECRET)
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "time": {"command": "uvx", "args": ["mcp-server-time"]},
                    "remote": {
                        "url": "https://mcp.example.com/mcp",
                        "headers": {"Authorization": "Bearer ${TOOLCHAT_TEST_MCP_TOKEN}"},
                    },
                }
            }
        ),
        encoding="utf-8",
    )
    time_server, remote = load_config(path)
    assert time_server.command == "uvx"
    assert time_server.args == ("mcp-server-time",)
    assert dict(remote.headers) == {"Authorization": f"Bearer {SECRET}"}


def test_a_missing_file_is_named(tmp_path):
    path = tmp_path / "nowhere.json"
    with pytest.raises(ImproperlyConfigured, match="no such file") as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_invalid_json_says_where(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {\n  "a": {"command": "x",}\n}}', encoding="utf-8")
    with pytest.raises(ImproperlyConfigured) as info:
        load_config(path)
    message = str(info.value)
    assert "not valid JSON" in message
    assert "line 2" in message
    assert "column" in message
    assert str(path) in message


def test_a_file_without_mcp_servers_is_refused(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text('{"servers": {"a": {"command": "x"}}}', encoding="utf-8")
    with pytest.raises(ImproperlyConfigured, match="mcpServers") as info:
        load_config(path)
    assert str(path) in str(info.value)


# --- What a server says about itself ---------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://alice:hunter2@mcp.example.com/mcp", "https://mcp.example.com/mcp"),
        ("https://mcp.example.com/mcp?token=hunter2&x=1", "https://mcp.example.com/mcp"),
        ("http://token@localhost:8080/mcp#hunter2", "http://localhost:8080/mcp"),
        ("https://mcp.example.com/mcp", "https://mcp.example.com/mcp"),
    ],
)
def test_where_shows_an_url_without_credentials_or_query(url, shown):
    assert one({"url": url}).where == shown


def test_where_shows_a_stdio_servers_command_line():
    server = one({"command": "uvx", "args": ["mcp-server-time", "--local-timezone", "UTC"]})
    assert server.where == "uvx mcp-server-time --local-timezone UTC"


def test_where_never_shows_a_secret_filled_into_a_stdio_servers_args():
    server = one(
        {"command": "server", "args": ["--api-key", "${TOKEN}"]}, environ={"TOKEN": SECRET}
    )
    assert server.args == ("--api-key", SECRET)  # the server itself gets it
    assert SECRET not in server.where


def test_requires_approval_true_false_or_a_list_of_tools():
    assert one({"command": "s", "requiresApproval": True}).tool_requires_approval("any") is True
    assert one({"command": "s"}).tool_requires_approval("any") is False
    listed = one({"command": "s", "requiresApproval": ["delete", "write"]})
    assert listed.tool_requires_approval("delete") is True
    assert listed.tool_requires_approval("read") is False


def test_allows_every_tool_unless_allow_tools_names_them():
    assert one({"command": "s"}).allows("anything") is True
    limited = one({"command": "s", "allowTools": ["search"]})
    assert limited.allows("search") is True
    assert limited.allows("delete") is False
    assert one({"command": "s", "allowTools": []}).allows("search") is False
