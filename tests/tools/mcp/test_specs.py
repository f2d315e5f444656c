"""An MCP server's tools as ToolSpecs: OpenAI-valid names, schemas checked, arguments validated."""

from __future__ import annotations

import copy
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from mcp import types

from tools.arguments import ArgumentsInvalid
from tools.context import ToolContext
from tools.executor import execute_tool
from tools.mcp.config import parse_config
from tools.mcp.specs import Listing, build_specs, parameters_problem, qualified_name
from tools.registry import ToolRegistry
from tools.results import ToolOutput
from tools.schema import MAX_SCHEMA_CHARS
from tools.spec import TOOL_NAME_RE, ToolSpec

ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}
ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "qty": {"type": "integer"}},
                "required": ["name"],
            },
        },
    },
    "required": ["items"],
}


def config(**entry):
    entry.setdefault("command", "server")
    [server] = parse_config({"mcpServers": {"shop": entry}}, environ={})
    return server


def make_tool(name="add", schema=None, description="Add two integers.", **fields) -> types.Tool:
    return types.Tool(
        name=name,
        description=description,
        input_schema=copy.deepcopy(schema if schema is not None else ADD_SCHEMA),
        **fields,
    )


class Calls(list):
    """A stand-in for the remote server: records each call and answers with a ToolOutput."""

    def __call__(self, server, tool, context, arguments):
        self.append((server.name, tool, context, arguments))
        return ToolOutput(
            result={"content": [{"type": "text", "text": f"{tool} ran"}], "echo": arguments},
            content=f"{tool} ran with {json.dumps(arguments, sort_keys=True)}",
        )


def build(tools, call=None, **entry) -> Listing:
    return build_specs(config(**entry), tools, call if call is not None else Calls())


def only_spec(listing: Listing) -> ToolSpec:
    [spec] = listing.specs.values()
    return spec


# --- Names -------------------------------------------------------------------------------


def test_a_valid_name_is_the_server_and_the_tool_joined_by_a_double_underscore():
    assert qualified_name("github", "create_issue") == "github__create_issue"
    assert qualified_name("a-b", "get-x_1") == "a-b__get-x_1"


@pytest.mark.parametrize(
    "tool", ["files.read", "files/read", "read file", "é", "x" * 64, "a" * 100 + ".b"]
)
def test_a_name_openai_refuses_becomes_a_valid_function_name(tool):
    name = qualified_name("files", tool)
    assert TOOL_NAME_RE.match(name), name
    assert name.startswith("files__")


def test_names_cleaned_to_the_same_text_stay_apart():
    names = {qualified_name("fs", tool) for tool in ["read.file", "read/file", "read file"]}
    assert len(names) == 3
    assert "fs__read_file" not in names  # left free for a tool really called read_file
    long_names = {qualified_name("fs", "x" * 70 + suffix) for suffix in ("a", "b")}
    assert len(long_names) == 2


def test_a_taken_name_is_not_given_again():
    first = qualified_name("fs", "read_file")
    second = qualified_name("fs", "read_file", taken={first: object()})
    assert second != first
    assert TOOL_NAME_RE.match(second)


def test_two_tools_never_share_a_name_even_when_one_looks_like_the_others_cleaned_name():
    hashed = qualified_name("shop", "x.y")  # shop__x_y_<6 hex>
    lookalike = hashed.removeprefix("shop__")
    assert qualified_name("shop", "x.y", taken={hashed: object()}) != hashed
    listing = build([make_tool(lookalike), make_tool("x.y")])
    assert len(listing.specs) == 2


# --- Schemas -----------------------------------------------------------------------------


def test_a_plain_object_schema_has_no_problem():
    assert parameters_problem(ADD_SCHEMA) is None
    assert parameters_problem({"type": "object"}) is None
    assert parameters_problem(ORDER_SCHEMA) is None


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        (["type", "object"], "not a JSON object"),
        ({"properties": {}}, '"type": "object"'),
        ({"type": "array", "items": {}}, '"type": "object"'),
        ({"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}, "anyOf"),
        ({"type": "object", "oneOf": [{"required": ["a"]}]}, "oneOf"),
        ({"type": "object", "allOf": [{"required": ["a"]}]}, "allOf"),
        ({"type": "object", "not": {"required": ["a"]}}, "not at the top level"),
        ({"type": "object", "enum": [{}]}, "enum"),
        ({"type": "object", "properties": ["a", "b"]}, "properties is not an object"),
        (
            {"type": "object", "properties": {"a": {"type": "nonsense"}}},
            "not valid JSON Schema",
        ),
        ({"type": "object", "required": "a"}, "not valid JSON Schema"),
    ],
)
def test_a_schema_the_model_api_or_json_schema_refuses_has_a_reason(schema, says):
    assert says in parameters_problem(schema)


def test_a_schema_over_the_size_limit_is_refused():
    properties = {f"p{i}": {"type": "string", "description": "x" * 100} for i in range(600)}
    schema = {"type": "object", "properties": properties}
    assert len(json.dumps(schema)) > MAX_SCHEMA_CHARS
    assert f"over {MAX_SCHEMA_CHARS}" in parameters_problem(schema)


def test_a_bad_schema_leaves_that_tool_out_and_keeps_the_others(caplog):
    bad = make_tool("search", {"type": "object", "anyOf": [{"required": ["q"]}]})
    listing = build([make_tool("add"), bad, make_tool("sub")])
    assert sorted(listing.specs) == ["shop__add", "shop__sub"]
    assert list(listing.skipped) == ["search"]
    assert "anyOf" in listing.skipped["search"]
    assert "search" in caplog.text


def test_allow_tools_keeps_only_the_tools_it_names():
    listing = build(
        [make_tool("add"), make_tool("delete"), make_tool("sub")], allowTools=["add", "sub"]
    )
    assert sorted(listing.specs) == ["shop__add", "shop__sub"]
    assert listing.skipped == {}


# --- Options -----------------------------------------------------------------------------


def test_a_spec_comes_from_its_server_with_its_options():
    spec = only_spec(build([make_tool("add")], timeout=7))
    assert spec.name == "shop__add"
    assert spec.server == "shop"
    assert spec.description == "Add two integers."
    assert spec.timeout == 7.0
    assert spec.requires_approval is False
    assert spec.idempotent is False  # no hints: not safe to repeat
    assert spec.param_names == ["a", "b"]


def test_requires_approval_true_applies_to_every_tool():
    listing = build([make_tool("add"), make_tool("delete")], requiresApproval=True)
    assert all(spec.requires_approval for spec in listing.specs.values())
    assert listing.specs["shop__add"].needs_approval({"a": 1, "b": 2}) is True


def test_requires_approval_as_a_list_applies_to_the_tools_named():
    listing = build([make_tool("add"), make_tool("delete")], requiresApproval=["delete"])
    assert listing.specs["shop__delete"].requires_approval is True
    assert listing.specs["shop__add"].requires_approval is False


@pytest.mark.parametrize(
    ("hints", "idempotent"),
    [
        ({"readOnlyHint": True}, True),
        ({"idempotentHint": True}, True),
        ({"readOnlyHint": False, "idempotentHint": False}, False),
        ({"destructiveHint": False}, False),
    ],
)
def test_idempotent_follows_the_read_only_and_idempotent_hints(hints, idempotent):
    tool = make_tool(
        annotations=types.ToolAnnotations.model_validate(hints)
    )  # as the wire spells them
    assert only_spec(build([tool])).idempotent is idempotent


def test_a_tool_without_description_gets_its_title_or_a_default():
    assert only_spec(build([make_tool(description=None, title="Adder")])).description == "Adder"
    spec = only_spec(build([make_tool(description="  ")]))
    assert spec.description == "The add tool of the shop MCP server."


def test_the_openai_tool_passes_the_input_schema_through_as_given():
    schema = {
        "type": "object",
        "properties": {"when": {"type": "string", "format": "date-time", "title": "When"}},
        "additionalProperties": False,
        "$defs": {"unused": {"type": "string"}},
    }
    entry = only_spec(build([make_tool("schedule", schema)])).openai_tool()
    assert entry == {
        "type": "function",
        "function": {
            "name": "shop__schedule",
            "description": "Add two integers.",
            "parameters": schema,
        },
    }


# --- Arguments ---------------------------------------------------------------------------


def errors_of(spec: ToolSpec, arguments: dict) -> list[dict[str, str]]:
    with pytest.raises(ArgumentsInvalid) as info:
        spec.validate_arguments(arguments)
    return info.value.errors


def test_valid_arguments_are_passed_on_as_given():
    spec = only_spec(build([make_tool("order", ORDER_SCHEMA)]))
    arguments = {"items": [{"name": "tea", "qty": 2}]}
    assert spec.validate_arguments(arguments) == arguments


def test_a_wrong_type_is_reported_under_its_field():
    spec = only_spec(build([make_tool("add")]))
    assert errors_of(spec, {"a": "two", "b": 2}) == [
        {"field": "a", "message": "'two' is not of type 'integer'"}
    ]


def test_a_missing_required_argument_is_reported_by_name():
    spec = only_spec(build([make_tool("add")]))
    [error] = errors_of(spec, {"a": 1})
    assert error == {"field": "b", "message": "'b' is a required property"}


def test_a_nested_mistake_is_reported_with_its_path():
    spec = only_spec(build([make_tool("order", ORDER_SCHEMA)]))
    errors = errors_of(spec, {"items": [{"name": "tea"}, {"name": 5, "qty": "x"}, {}]})
    assert errors == [
        {"field": "items.1.name", "message": "5 is not of type 'string'"},
        {"field": "items.1.qty", "message": "'x' is not of type 'integer'"},
        {"field": "items.2.name", "message": "'name' is a required property"},
    ]


class _Recorder(BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self):
        type(self).hits.append(self.path)
        body = b'{"type": "string"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/schema+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def schema_host():
    """A loopback server that would serve a schema, and records whoever asks for one."""
    _Recorder.hits = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Recorder.hits
    server.shutdown()
    server.server_close()


def test_a_remote_ref_is_never_fetched_and_leaves_its_tool_out(schema_host):
    base, hits = schema_host
    schema = {"type": "object", "properties": {"a": {"$ref": f"{base}/a.json"}}}
    started = time.monotonic()
    problem = parameters_problem(schema)
    assert time.monotonic() - started < 1
    assert hits == []
    assert problem is not None
    assert "cannot be checked" in problem
    assert "a.json" in problem
    listing = build([make_tool("remote", schema)])
    assert listing.specs == {}
    assert "cannot be checked" in listing.skipped["remote"]


def test_a_local_ref_is_resolved_inside_the_schema():
    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/count"}},
        "$defs": {"count": {"type": "integer", "minimum": 0}},
    }
    spec = only_spec(build([make_tool("local", schema)]))
    assert spec.validate_arguments({"a": 3}) == {"a": 3}
    assert errors_of(spec, {"a": -1}) == [
        {"field": "a", "message": "-1 is less than the minimum of 0"}
    ]


# --- Through the executor ----------------------------------------------------------------


class Source:
    """A tool source holding one listing, as the MCP hub is one."""

    def __init__(self, listing: Listing) -> None:
        self.listing = listing

    def specs(self) -> list[ToolSpec]:
        return list(self.listing.specs.values())

    def get(self, name: str) -> ToolSpec | None:
        return self.listing.specs.get(name)


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def mcp_registry(calls) -> ToolRegistry:
    reg = ToolRegistry()
    reg.add_source(Source(build([make_tool("add"), make_tool("order", ORDER_SCHEMA)], calls)))
    return reg


def run(reg, name, arguments, context):
    return execute_tool(name=name, arguments=arguments, context=context, registry=reg)


def test_the_registry_offers_the_servers_tools(mcp_registry):
    assert mcp_registry.names() == ["shop__add", "shop__order"]
    assert "shop__add" in mcp_registry


def test_invalid_arguments_come_back_as_a_validation_error_and_nothing_is_sent(
    mcp_registry, calls, make_context
):
    result = run(mcp_registry, "shop__order", '{"items": [{"name": 5}]}', make_context())
    assert result.status == "failed"
    assert result.error_type == "validation_error"
    body = json.loads(result.content)
    assert body["success"] is False
    assert body["details"]["errors"] == [
        {"field": "items.0.name", "message": "5 is not of type 'string'"}
    ]
    assert calls == []


def test_a_valid_call_reaches_the_server_and_returns_its_output(mcp_registry, calls, make_context):
    context = make_context()
    result = run(mcp_registry, "shop__add", '{"a": 2, "b": 3}', context)
    assert result.status == "succeeded"
    assert result.content == 'add ran with {"a": 2, "b": 3}'
    assert result.result == {
        "content": [{"type": "text", "text": "add ran"}],
        "echo": {"a": 2, "b": 3},
    }
    assert result.audit_arguments == {"a": 2, "b": 3}
    [(server, tool, seen_context, arguments)] = calls
    assert (server, tool, arguments) == ("shop", "add", {"a": 2, "b": 3})
    assert seen_context is context


def test_a_tool_may_have_a_parameter_called_context(make_context):
    calls = Calls()
    schema = {"type": "object", "properties": {"context": {"type": "string"}}}
    reg = ToolRegistry()
    reg.add_source(Source(build([make_tool("ask", schema)], calls)))
    result = run(reg, "shop__ask", '{"context": "the user is in Paris"}', make_context())
    assert result.status == "succeeded"
    assert calls[0][3] == {"context": "the user is in Paris"}
    assert isinstance(calls[0][2], ToolContext)


def test_an_error_output_from_the_server_is_a_failed_call(make_context):
    def failing(server, tool, context, arguments):
        return ToolOutput(
            result={"content": [], "isError": True},
            content='{"success": false, "error": "no such repo"}',
            error="no such repo",
        )

    reg = ToolRegistry()
    reg.add_source(Source(build([make_tool("add")], failing)))
    result = run(reg, "shop__add", '{"a": 1, "b": 2}', make_context())
    assert result.status == "failed"
    assert result.error == "no such repo"
    assert result.error_type == "tool_reported"
    assert result.result == {"content": [], "isError": True}
