"""@tool and the registry: schemas from type hints, fit for OpenAI; misdefinitions fail at import."""

from __future__ import annotations

import ast
import datetime
import enum
import importlib
import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import pytest
from django.core.exceptions import ImproperlyConfigured
from jsonschema import Draft202012Validator
from openai.types.chat import ChatCompletionToolParam
from pydantic import BaseModel, Field, TypeAdapter

from tools.arguments import ArgumentsInvalid
from tools.context import ToolContext
from tools.docstrings import parse_args_section
from tools.registry import (
    TOOL_NAME_RE,
    ToolDefinitionError,
    ToolRegistry,
    load_tool_modules,
    registry,
)

OPENAI_TOOL = TypeAdapter(ChatCompletionToolParam)


def assert_openai_tool(entry: dict[str, Any]) -> dict[str, Any]:
    """Check one `tools` entry the way the OpenAI API would, and return its parameters."""
    OPENAI_TOOL.validate_python(entry, strict=False)
    assert entry["type"] == "function"
    function = entry["function"]
    assert TOOL_NAME_RE.match(function["name"])
    assert isinstance(function["description"], str)
    assert function["description"]
    parameters = function["parameters"]
    assert parameters["type"] == "object"
    assert isinstance(parameters["properties"], dict)
    assert isinstance(parameters["required"], list)
    assert set(parameters["required"]) <= set(parameters["properties"])
    Draft202012Validator.check_schema(parameters)
    assert not _keyword_anywhere(parameters, "title"), "pydantic's titles are noise"
    assert not _keyword_anywhere(parameters, "$ref"), "refs are inlined"
    json.dumps(parameters)  # plain JSON, nothing pydantic left in it
    return parameters


def _keyword_anywhere(schema: Any, keyword: str) -> bool:
    if isinstance(schema, list):
        return any(_keyword_anywhere(item, keyword) for item in schema)
    if not isinstance(schema, dict):
        return False
    for key, value in schema.items():
        if key == keyword and not isinstance(value, dict):
            return True
        if key == "properties":
            if any(_keyword_anywhere(sub, keyword) for sub in value.values()):
                return True
        elif key not in {"default", "enum", "const", "examples"} and _keyword_anywhere(
            value, keyword
        ):
            return True
    return False


# --- One tool per supported type --------------------------------------------------------

SCHEMAS = ToolRegistry()


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Address(BaseModel):
    """A postal address."""

    street: str
    city: str
    postcode: str | None = None


class Order(BaseModel):
    items: list[str]
    ship_to: Address


@SCHEMAS.tool
def t_str(ctx: ToolContext, value: str) -> str:
    """Takes a string."""
    return value


@SCHEMAS.tool
def t_int(ctx: ToolContext, value: int) -> int:
    """Takes an integer."""
    return value


@SCHEMAS.tool
def t_float(ctx: ToolContext, value: float) -> float:
    """Takes a number."""
    return value


@SCHEMAS.tool
def t_bool(ctx: ToolContext, value: bool) -> bool:
    """Takes a boolean."""
    return value


@SCHEMAS.tool
def t_literal(ctx: ToolContext, value: Literal["celsius", "fahrenheit"]) -> str:
    """Takes a literal."""
    return value


@SCHEMAS.tool
def t_enum(ctx: ToolContext, value: Color = Color.RED) -> str:
    """Takes an enum."""
    return value.value


@SCHEMAS.tool
def t_int_enum(ctx: ToolContext, value: Priority) -> int:
    """Takes an int enum."""
    return int(value)


@SCHEMAS.tool
def t_list(ctx: ToolContext, value: list[int]) -> int:
    """Takes a list."""
    return sum(value)


@SCHEMAS.tool
def t_optional(ctx: ToolContext, value: Optional[int] = None) -> Any:  # noqa: UP045 - both spellings
    """Takes an optional integer."""
    return value


@SCHEMAS.tool
def t_union_none_required(ctx: ToolContext, value: str | None) -> Any:
    """Takes a nullable but required string."""
    return value


@SCHEMAS.tool
def t_defaults(ctx: ToolContext, a: str = "x", b: int = 3, c: float = 0.5, d: bool = False) -> Any:
    """Takes defaults."""
    return [a, b, c, d]


@SCHEMAS.tool
def t_model(ctx: ToolContext, value: Address) -> str:
    """Takes a model."""
    return value.city


@SCHEMAS.tool
def t_nested(ctx: ToolContext, value: Order, backup: list[Address] | None = None) -> str:
    """Takes nested models."""
    return value.ship_to.city


@SCHEMAS.tool
def t_constrained(
    ctx: ToolContext,
    value: Annotated[int, Field(ge=1, le=10, description="From one to ten.")],
) -> int:
    """Takes a constrained integer.

    Args:
        value: This description loses to the one in Field.
    """
    return value


@SCHEMAS.tool
def t_dict(ctx: ToolContext, value: dict[str, int]) -> int:
    """Takes a mapping."""
    return len(value)


@SCHEMAS.tool
def t_datetime(ctx: ToolContext, value: datetime.date) -> str:
    """Takes a date."""
    return value.isoformat()


@SCHEMAS.tool
def t_none(ctx: ToolContext) -> str:
    """Takes nothing."""
    return "ok"


# name: (expected property schema subset, valid arguments, invalid arguments)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    "t_str": ({"type": "string"}, {"value": "a"}, {"value": 1}),
    "t_int": ({"type": "integer"}, {"value": 3}, {"value": "three"}),
    "t_float": ({"type": "number"}, {"value": 2.5}, {"value": "x"}),
    "t_bool": ({"type": "boolean"}, {"value": True}, {"value": "maybe"}),
    "t_literal": (
        {"type": "string", "enum": ["celsius", "fahrenheit"]},
        {"value": "celsius"},
        {"value": "kelvin"},
    ),
    "t_enum": (
        {"type": "string", "enum": ["red", "green"], "default": "red"},
        {"value": "green"},
        {"value": "blue"},
    ),
    "t_int_enum": ({"type": "integer", "enum": [1, 2]}, {"value": 2}, {"value": 3}),
    "t_list": ({"type": "array", "items": {"type": "integer"}}, {"value": [1, 2]}, {"value": 1}),
    "t_optional": (
        {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
        {"value": None},
        {"value": "x"},
    ),
    "t_union_none_required": (
        {"anyOf": [{"type": "string"}, {"type": "null"}]},
        {"value": None},
        {},
    ),
    "t_model": (
        {"type": "object", "required": ["street", "city"], "description": "A postal address."},
        {"value": {"street": "1 Main St", "city": "Springfield"}},
        {"value": {"street": "1 Main St"}},
    ),
    "t_constrained": (
        {"type": "integer", "minimum": 1, "maximum": 10, "description": "From one to ten."},
        {"value": 10},
        {"value": 11},
    ),
    "t_dict": (
        {"type": "object", "additionalProperties": {"type": "integer"}},
        {"value": {"a": 1}},
        {"value": {"a": "b"}},
    ),
    "t_datetime": ({"type": "string", "format": "date"}, {"value": "2025-06-03"}, {"value": 5}),
}


@pytest.mark.parametrize("name", SCHEMAS.names())
def test_every_schema_is_a_valid_openai_tool(name):
    assert_openai_tool(SCHEMAS.get(name).openai_tool())


@pytest.mark.parametrize("name", list(CASES))
def test_schema_of_each_type(name):
    expected, valid, invalid = CASES[name]
    parameters = assert_openai_tool(SCHEMAS.get(name).openai_tool())
    prop = parameters["properties"]["value"]
    for key, value in expected.items():
        assert prop[key] == value, (key, prop)
    # The schema and the validator agree on what is acceptable.
    validator = Draft202012Validator(parameters)
    assert not list(validator.iter_errors(valid))
    SCHEMAS.get(name).validate_arguments(valid)
    assert list(validator.iter_errors(invalid))
    with pytest.raises(ArgumentsInvalid):
        SCHEMAS.get(name).validate_arguments(invalid)


def test_required_lists_exactly_the_parameters_without_defaults():
    schema = SCHEMAS.get("t_defaults").parameters
    assert schema["required"] == []
    assert [schema["properties"][k]["default"] for k in "abcd"] == ["x", 3, 0.5, False]
    assert SCHEMAS.get("t_int").parameters["required"] == ["value"]
    assert SCHEMAS.get("t_union_none_required").parameters["required"] == ["value"]


def test_a_tool_without_parameters_has_an_empty_object_schema():
    parameters = assert_openai_tool(SCHEMAS.get("t_none").openai_tool())
    assert parameters["properties"] == {}
    assert parameters["required"] == []


def test_nested_models_are_inlined_and_reach_the_tool_as_models():
    parameters = SCHEMAS.get("t_nested").parameters
    ship_to = parameters["properties"]["value"]["properties"]["ship_to"]
    assert ship_to["properties"]["city"] == {"type": "string"}
    backup = parameters["properties"]["backup"]["anyOf"][0]
    assert backup["items"]["required"] == ["street", "city"]
    kwargs = SCHEMAS.get("t_nested").validate_arguments(
        {"value": {"items": ["a"], "ship_to": {"street": "s", "city": "c"}}}
    )
    assert isinstance(kwargs["value"], Order)
    assert isinstance(kwargs["value"].ship_to, Address)
    assert kwargs["backup"] is None


def test_enum_arguments_reach_the_tool_as_members():
    assert SCHEMAS.get("t_enum").validate_arguments({"value": "green"}) == {"value": Color.GREEN}
    assert SCHEMAS.get("t_enum").validate_arguments({}) == {"value": Color.RED}


def test_extra_arguments_are_refused_and_the_schema_says_so():
    spec = SCHEMAS.get("t_str")
    assert spec.parameters["additionalProperties"] is False
    with pytest.raises(ArgumentsInvalid, match="Extra inputs"):
        spec.validate_arguments({"value": "a", "other": 1})


def test_description_and_parameter_docs_come_from_the_docstring(reg):
    @reg.tool(timeout=5)
    def record(ctx: ToolContext, title: str, body: str = "", *, tags: list[str] | None = None):
        """Record a household event.

        It is kept for later.

        Args:
            ctx: The call.
            title: A short title.
            body (str): The details,
                over two lines.
            tags: Labels.

        Returns:
            The note.
        """

    spec = reg.get("record")
    assert spec.description == "Record a household event."
    props = spec.parameters["properties"]
    assert props["title"]["description"] == "A short title."
    assert props["body"]["description"] == "The details, over two lines."
    assert props["tags"]["description"] == "Labels."
    assert spec.timeout == 5


def test_explicit_description_wins_and_may_span_lines(reg):
    @reg.tool(description="Line one.\nLine two.")
    def described(ctx: ToolContext) -> None:
        """Ignored."""

    assert reg.get("described").description == "Line one.\nLine two."


def test_parse_args_section_ignores_other_sections():
    doc = """Do it.

    Args:
        a: First.
        b (int, optional): Second,
            continued.

    Raises:
        ValueError: never a parameter.
    """
    assert parse_args_section(doc) == {"a": "First.", "b": "Second, continued."}


def test_flags_and_context_parameter_options(reg):
    @reg.tool(
        name="custom-name",
        idempotent=False,
        return_direct=True,
        requires_approval=True,
        sensitive=["token"],
        timeout=2.5,
    )
    async def something(*, context: ToolContext, token: str, json: str = "", schema: int = 0):
        """Parameters may shadow BaseModel attributes, and the context may be keyword-only."""

    spec = reg.get("custom-name")
    assert spec.is_async
    assert (spec.idempotent, spec.return_direct, spec.requires_approval) == (False, True, True)
    assert spec.sensitive == frozenset({"token"})
    assert spec.context_param == "context"
    assert spec.context_by_keyword
    assert spec.param_names == ["token", "json", "schema"]
    assert reg.names() == ["custom-name"]
    assert "custom-name" in reg
    assert len(reg) == 1


def test_a_single_sensitive_name_is_not_split_into_letters(reg):
    @reg.tool(sensitive="password")
    def login(ctx: ToolContext, password: str) -> None:
        """Log in."""

    assert reg.get("login").sensitive == frozenset({"password"})


def test_openai_tools_filters_by_name_in_the_given_order():
    names = ["t_int", "t_str"]
    assert [t["function"]["name"] for t in SCHEMAS.openai_tools(names)] == names
    assert len(SCHEMAS.openai_tools()) == len(SCHEMAS.names())
    with pytest.raises(LookupError, match="nope"):
        SCHEMAS.openai_tools(["nope"])


def test_exported_schemas_are_copies():
    SCHEMAS.openai_tools(["t_int"])[0]["function"]["parameters"]["properties"].clear()
    assert SCHEMAS.get("t_int").parameters["properties"]


def test_the_default_registry_holds_the_builtin_tools():
    assert {
        "calculator",
        "get_current_time",
        "record_note",
        "search_notes",
        "generate_dataset",
    } <= set(registry.names())
    for entry in registry.openai_tools():
        assert_openai_tool(entry)


# --- Definition errors ---------------------------------------------------------------------


def test_duplicate_name_fails_naming_the_tool_and_both_places(reg):
    @reg.tool
    def twice(ctx: ToolContext) -> None:
        """First."""

    with pytest.raises(ToolDefinitionError, match=r"'twice' is defined twice") as info:

        @reg.tool(name="twice")
        def other(ctx: ToolContext) -> None:
            """Second."""

    assert "other" in str(info.value)
    assert reg.get("twice").description == "First."


class Opaque:
    """A class pydantic knows nothing about."""


MISDEFINITIONS = [
    ("def no_ctx(x: int) -> int:\n    '''Doc.'''", "first parameter of tool 'no_ctx'"),
    ("def no_params():\n    '''Doc.'''", "tool 'no_params'.*takes no parameters"),
    ("def bad_ctx(ctx: int, x: int):\n    '''Doc.'''", "'ctx', must be annotated ToolContext"),
    ("def unhinted(ctx: ToolContext, x):\n    '''Doc.'''", "'unhinted'.*'x' has no type hint"),
    ("def anything(ctx: ToolContext, x: Any):\n    '''Doc.'''", "'anything'.*'x' is typed"),
    ("def obj(ctx: ToolContext, x: object):\n    '''Doc.'''", "'obj'.*'x' is typed"),
    ("def arbitrary(ctx: ToolContext, x: Opaque):\n    '''Doc.'''", "'arbitrary'.*pydantic"),
    ("def fn(ctx: ToolContext, x: Callable[[int], int]):\n    '''Doc.'''", "tool 'fn'"),
    ("def starred(ctx: ToolContext, *args: int):\n    '''Doc.'''", "'starred'.*\\*args"),
    ("def kw(ctx: ToolContext, **kw: int):\n    '''Doc.'''", "'kw'.*\\*\\*kw"),
    ("def posonly(ctx: ToolContext, x: int, /):\n    '''Doc.'''", "'posonly'.*positional-only"),
    ("def undocumented(ctx: ToolContext):\n    pass", "'undocumented' .*no description"),
    (
        "def stale(ctx: ToolContext):\n    '''Doc.\n\n    Args:\n        gone: Old.\n    '''",
        "'stale'.*documents gone",
    ),
    ("def gen(ctx: ToolContext):\n    '''Doc.'''\n    yield 1", "'gen'.*generator"),
    ("def unresolved(ctx: ToolContext, x: 'Missing'):\n    '''Doc.'''", "'unresolved'"),
]


def _defined_name(source: str) -> str:
    return source.split("(")[0].removeprefix("def ")


@pytest.mark.parametrize(
    ("source", "message"), MISDEFINITIONS, ids=[_defined_name(s) for s, _ in MISDEFINITIONS]
)
def test_misdefinitions_fail_at_definition_naming_the_tool(reg, source, message):
    namespace = {
        "ToolContext": ToolContext,
        "Any": Any,
        "Opaque": Opaque,
        "Callable": Callable,
        "reg": reg,
    }
    name = _defined_name(source)
    code = f"@reg.tool\n{source}\n"
    with pytest.raises(ToolDefinitionError, match=message) as info:
        exec(compile(code, f"<{name}>", "exec"), namespace)
    assert f"'{name}'" in str(info.value)
    assert name not in reg


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "dots.not.allowed", "é"])
def test_invalid_names_fail(reg, name):
    def fine(ctx: ToolContext) -> None:
        """Doc."""

    with pytest.raises(ToolDefinitionError, match="Invalid name"):
        reg.tool(name=name)(fine)


@pytest.mark.parametrize("timeout", [0, -1, float("inf"), float("nan"), True, "30"])
def test_invalid_timeouts_fail(reg, timeout):
    def fine(ctx: ToolContext) -> None:
        """Doc."""

    with pytest.raises(ToolDefinitionError, match="timeout"):
        reg.tool(timeout=timeout)(fine)


def test_sensitive_must_name_parameters(reg):
    def fine(ctx: ToolContext, a: str) -> None:
        """Doc."""

    with pytest.raises(ToolDefinitionError, match=r"sensitive=.*secret"):
        reg.tool(sensitive=["secret"])(fine)


def test_an_unknown_option_fails_naming_the_tool(reg):
    def fine(ctx: ToolContext) -> None:
        """Doc."""

    with pytest.raises(ToolDefinitionError, match=r"'fine'.*unknown option\(s\) retries"):
        reg.tool(retries=3)(fine)  # type: ignore[call-overload]
    with pytest.raises(ToolDefinitionError, match=r"unknown option\(s\) retries"):
        reg.register(fine, retries=3)  # type: ignore[call-arg]
    assert len(reg) == 0


def test_options_left_out_take_their_defaults_and_register_takes_the_same_options(reg):
    def bare(ctx: ToolContext) -> None:
        """Bare."""

    def explicit(ctx: ToolContext, key: str) -> None:
        """Doc."""

    default = reg.register(bare)
    assert (default.name, default.description, default.timeout) == ("bare", "Bare.", 30.0)
    assert (default.idempotent, default.return_direct, default.requires_approval) == (
        True,
        False,
        False,
    )
    assert default.sensitive == frozenset()

    spec = reg.register(
        explicit,
        name="renamed",
        description="Described.",
        timeout=5,
        idempotent=False,
        return_direct=True,
        requires_approval=True,
        sensitive=["key"],
    )
    assert (spec.name, spec.description, spec.timeout) == ("renamed", "Described.", 5.0)
    assert (spec.idempotent, spec.return_direct, spec.requires_approval) == (False, True, True)
    assert spec.sensitive == frozenset({"key"})


def test_local_types_resolve_under_postponed_annotations(reg):
    class Local(BaseModel):
        n: int

    @reg.tool
    def uses_local(ctx: ToolContext, value: Local) -> int:
        """Uses a class defined in this function."""
        return value.n

    assert reg.get("uses_local").parameters["properties"]["value"]["required"] == ["n"]


# --- Loading modules ---------------------------------------------------------------------


@pytest.fixture
def module_dir(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("toolchat_test_")]:
        del sys.modules[name]


def test_a_misdefined_tool_fails_when_its_module_is_imported(module_dir):
    (module_dir / "toolchat_test_broken.py").write_text(
        textwrap.dedent(
            """
            from tools.registry import ToolRegistry

            reg = ToolRegistry()

            @reg.tool
            def broken(x: int) -> int:
                '''No context.'''
                return x
            """
        )
    )
    with pytest.raises(ToolDefinitionError, match="'broken'"):
        importlib.import_module("toolchat_test_broken")


def test_load_tool_modules_names_a_missing_module():
    with pytest.raises(ImproperlyConfigured, match=r"'tools\.builtin\.nope'.*does not exist"):
        load_tool_modules(["tools.builtin.nope"])


def test_load_tool_modules_names_a_module_whose_tool_is_misdefined(module_dir):
    (module_dir / "toolchat_test_dupe.py").write_text(
        textwrap.dedent(
            """
            from tools.context import ToolContext
            from tools.registry import tool

            @tool
            def calculator(ctx: ToolContext, expression: str) -> str:
                '''A second calculator.'''
                return expression
            """
        )
    )
    with pytest.raises(ImproperlyConfigured, match="toolchat_test_dupe") as info:
        load_tool_modules(["toolchat_test_dupe"])
    assert "'calculator' is defined twice" in str(info.value)
    assert isinstance(info.value.__cause__, ToolDefinitionError)
    assert registry.get("calculator").func.__module__ == "tools.builtin.calculator"


def test_load_tool_modules_names_a_module_that_fails_to_import(module_dir):
    (module_dir / "toolchat_test_raises.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ImproperlyConfigured, match=r"toolchat_test_raises.*RuntimeError: boom"):
        load_tool_modules(["toolchat_test_raises"])


def test_tools_never_imports_chat():
    root = Path(__file__).resolve().parents[2] / "tools"
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "chat"]
    assert offenders == []


def test_load_tool_modules_tells_a_missing_module_from_a_missing_import(module_dir):
    (module_dir / "toolchat_test_needs.py").write_text("import toolchat_no_such_dependency\n")
    with pytest.raises(ImproperlyConfigured, match="failed to import") as info:
        load_tool_modules(["toolchat_test_needs"])
    assert "toolchat_no_such_dependency" in str(info.value)


def test_an_approval_rule_or_describe_hook_that_is_not_a_function_is_refused():
    from tools.definition import ToolDefinitionError, build_spec

    def launch(ctx: ToolContext, target: str) -> dict:
        """Launch."""
        return {}

    with pytest.raises(ToolDefinitionError, match="requires_approval"):
        build_spec(launch, requires_approval="yes")  # type: ignore[arg-type]
    with pytest.raises(ToolDefinitionError, match="describe"):
        build_spec(launch, requires_approval=True, describe="Launches.")  # type: ignore[arg-type]


def test_an_approval_rule_that_fails_asks_for_approval_and_a_failing_describe_falls_back():
    from tools.definition import build_spec

    def launch(ctx: ToolContext, target: str) -> dict:
        """Launch."""
        return {}

    spec = build_spec(launch, requires_approval=lambda args: 1 / 0, describe=lambda args: 1 / 0)
    assert spec.needs_approval({"target": "mars"}) is True
    assert spec.describe_call({"target": "mars"}) == "launch(target='mars')"
    assert build_spec(launch).needs_approval({"target": "mars"}) is False


def test_a_request_that_changes_its_tools_leaves_the_registered_schema_as_it_was():
    spec = SCHEMAS.get("t_datetime")
    offered = spec.openai_tool()
    offered["function"]["parameters"]["properties"]["value"]["format"] = "changed"
    offered["function"]["parameters"]["required"].append("extra")

    again = spec.openai_tool()["function"]["parameters"]
    assert again["properties"]["value"]["format"] == "date"
    assert "extra" not in again["required"]
    assert again == spec.parameters
