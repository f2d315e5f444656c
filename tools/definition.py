"""How a Python function becomes a tool: `@tool`'s options, checked, and the spec made.

`build_spec` is the one place that reads a tool's options and checks its
function: the parameters' JSON Schema comes from the type hints through
pydantic, the description from the docstring, and every mistake in a
definition is a `ToolDefinitionError` naming the tool.
"""

from __future__ import annotations

import inspect
import math
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypedDict, Unpack

from pydantic import ConfigDict, Field, TypeAdapter, create_model
from pydantic.fields import FieldInfo

from tools.arguments import ModelArguments
from tools.context import ToolContext
from tools.docstrings import first_paragraph, parse_args_section
from tools.schema import clean_schema
from tools.spec import DEFAULT_TIMEOUT_S, TOOL_NAME_RE, ToolSpec


class ToolDefinitionError(TypeError):
    """A tool is misdefined; raised while its module is imported."""


class ToolOptions(TypedDict, total=False):
    """The options of `@tool(...)` and `registry.register(...)`; each may be left out.

    Left out, a tool is named after its function, described by its docstring's
    first paragraph, times out after DEFAULT_TIMEOUT_S, is idempotent, returns
    to the model, runs without approval and has no sensitive parameter (the
    defaults are applied in `build_spec`, the one place that reads the options).
    """

    name: str | None
    description: str | None
    timeout: float
    idempotent: bool
    return_direct: bool
    # True, or a function of a call's arguments that says whether this call needs
    # its owner's approval before it runs (e.g. only when it deletes several notes).
    requires_approval: bool | Callable[[Mapping[str, Any]], bool]
    # What a call will do, in one line, from its arguments (sensitive ones masked):
    # what a person approving it reads. Default: the name and the arguments.
    describe: Callable[[Mapping[str, Any]], str]
    # Parameter names whose values are masked wherever arguments are kept or shown.
    sensitive: Iterable[str]


def build_spec(
    func: Callable[..., Any],
    *,
    localns: Mapping[str, Any] | None = None,
    **options: Unpack[ToolOptions],
) -> ToolSpec:
    """Check a function and its options and describe it as a tool."""
    name = options.get("name")
    tool_name = name if name is not None else getattr(func, "__name__", repr(func))
    label = f"tool {tool_name!r} ({where_defined(func)})"
    # A type checker catches a misspelled option; this catches it for everyone else.
    unknown_options = sorted(set(options) - ToolOptions.__optional_keys__)
    if unknown_options:
        raise ToolDefinitionError(
            f"{label}: unknown option(s) {', '.join(unknown_options)}; "
            f"the options are {', '.join(ToolOptions.__annotations__)}."
        )
    description = options.get("description")
    timeout = options.get("timeout", DEFAULT_TIMEOUT_S)
    sensitive = options.get("sensitive", ())
    approval = options.get("requires_approval", False)
    describe = options.get("describe")
    _options_check(func, tool_name, label, timeout=timeout, approval=approval, describe=describe)

    hints = _type_hints(func, label, localns)
    params = list(inspect.signature(func).parameters.values())
    context_param, context_by_keyword = _context_parameter(params, hints, label)

    doc = inspect.getdoc(func) or ""
    arg_docs = parse_args_section(doc)
    param_names = [p.name for p in params[1:]]
    stale = sorted(set(arg_docs) - set(param_names) - {context_param})
    if stale:
        raise ToolDefinitionError(
            f"The docstring of {label} documents {', '.join(stale)} in its Args: section, "
            "which is not a parameter."
        )
    tool_description = (description if description is not None else first_paragraph(doc)).strip()
    if not tool_description:
        raise ToolDefinitionError(
            f"{label} has no description: give it a docstring or pass description=..."
        )

    sensitive_names = frozenset((sensitive,) if isinstance(sensitive, str) else sensitive)
    unknown_sensitive = sorted(sensitive_names - set(param_names))
    if unknown_sensitive:
        raise ToolDefinitionError(
            f"{label}: sensitive= names {', '.join(unknown_sensitive)}, which is not a parameter."
        )

    field_definitions: dict[str, Any] = {}
    fields: dict[str, str] = {}
    for index, param in enumerate(params[1:]):
        field = f"p{index}"
        field_definitions[field] = _argument_field(param, hints, arg_docs, label)
        fields[param.name] = field

    model_name = f"{_camel(tool_name)}Arguments"
    try:
        arguments_model = create_model(
            model_name,
            __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **field_definitions,
        )
        raw_schema = arguments_model.model_json_schema(by_alias=True)
    except Exception as exc:
        raise ToolDefinitionError(
            f"{label} has a parameter type pydantic cannot turn into a JSON Schema: {exc}"
        ) from exc

    parameters = clean_schema(raw_schema)
    for param_name, prop in parameters["properties"].items():
        if not _has_type_information(prop):
            raise ToolDefinitionError(
                f"{label}: parameter {param_name!r} has a type with no JSON Schema type "
                f"({prop!r}); use a concrete type."
            )

    return ToolSpec(
        name=tool_name,
        description=tool_description,
        func=func,
        is_async=inspect.iscoroutinefunction(func),
        parameters=parameters,
        arguments=ModelArguments(arguments_model, fields),
        context_param=context_param,
        context_by_keyword=context_by_keyword,
        timeout=float(timeout),
        idempotent=options.get("idempotent", True),
        return_direct=options.get("return_direct", False),
        requires_approval=bool(approval),
        approval_rule=approval if callable(approval) else None,
        describe=describe,
        sensitive=sensitive_names,
    )


def _options_check(
    func: Callable[..., Any],
    tool_name: Any,
    label: str,
    *,
    timeout: Any,
    approval: Any,
    describe: Any,
) -> None:
    """Refuse a tool whose name, function or options cannot make a tool, naming it."""
    if not isinstance(tool_name, str) or not TOOL_NAME_RE.match(tool_name):
        raise ToolDefinitionError(
            f"Invalid name for {label}: names must match {TOOL_NAME_RE.pattern} "
            "(letters, digits, _ and -, at most 64 characters)."
        )
    if not inspect.isfunction(func):
        raise ToolDefinitionError(f"{label} must be a plain function (def or async def).")
    if inspect.isasyncgenfunction(func) or inspect.isgeneratorfunction(func):
        raise ToolDefinitionError(f"{label} is a generator; a tool returns its result.")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ToolDefinitionError(f"{label}: timeout must be a number of seconds.")
    if not (math.isfinite(timeout) and timeout > 0):
        raise ToolDefinitionError(f"{label}: timeout must be a positive number of seconds.")
    if not isinstance(approval, bool) and not callable(approval):
        raise ToolDefinitionError(
            f"{label}: requires_approval must be True, False or a function of the arguments."
        )
    if describe is not None and not callable(describe):
        raise ToolDefinitionError(f"{label}: describe must be a function of the arguments.")


def _argument_field(
    param: inspect.Parameter, hints: Mapping[str, Any], arg_docs: Mapping[str, str], label: str
) -> tuple[Any, Any]:
    """The pydantic field of one parameter: its type, alias, description and default."""
    if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
        raise ToolDefinitionError(
            f"{label}: *{param.name} / **{param.name} are not supported; "
            "the model needs a named, typed parameter for each argument."
        )
    if param.kind is param.POSITIONAL_ONLY:
        raise ToolDefinitionError(
            f"{label}: parameter {param.name!r} is positional-only; "
            "tools are called with keyword arguments."
        )
    if param.name not in hints:
        raise ToolDefinitionError(
            f"{label}: parameter {param.name!r} has no type hint; "
            "the JSON Schema is made from the type hints."
        )
    annotation = hints[param.name]
    if annotation in (Any, object):
        raise ToolDefinitionError(
            f"{label}: parameter {param.name!r} is typed {_type_name(annotation)}, which tells the "
            "model nothing; use a concrete type (str, int, a pydantic model...)."
        )
    _check_type(annotation, param.name, label)
    field_options: dict[str, Any] = {"alias": param.name}
    if param.name in arg_docs and not _annotated_description(annotation):
        field_options["description"] = arg_docs[param.name]
    if param.default is not param.empty:
        field_options["default"] = param.default
    return (annotation, Field(**field_options))


def _type_hints(
    func: Callable[..., Any], label: str, localns: Mapping[str, Any] | None
) -> dict[str, Any]:
    try:
        return typing.get_type_hints(
            func, localns=dict(localns) if localns else None, include_extras=True
        )
    except Exception as exc:
        raise ToolDefinitionError(
            f"Could not resolve the type hints of {label}: {exc}. "
            "Types named in hints must be importable at runtime, not only under TYPE_CHECKING."
        ) from exc


def _context_parameter(
    params: list[inspect.Parameter], hints: Mapping[str, Any], label: str
) -> tuple[str, bool]:
    if not params:
        raise ToolDefinitionError(
            f"{label} takes no parameters; its first parameter must be a ToolContext "
            "(def my_tool(ctx: ToolContext, ...))."
        )
    first = params[0]
    hint = hints.get(first.name)
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if not (isinstance(hint, type) and issubclass(hint, ToolContext)):
        raise ToolDefinitionError(
            f"The first parameter of {label}, {first.name!r}, must be annotated ToolContext "
            f"(found {hint!r})."
        )
    if first.kind in (first.VAR_POSITIONAL, first.VAR_KEYWORD):
        raise ToolDefinitionError(f"{label}: the ToolContext parameter must be a named parameter.")
    return first.name, first.kind is first.KEYWORD_ONLY


def _check_type(annotation: Any, param: str, label: str) -> None:
    try:
        TypeAdapter(annotation).json_schema()
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ToolDefinitionError(
            f"{label}: parameter {param!r} has type {_type_name(annotation)}, which pydantic "
            f"cannot turn into a JSON Schema ({reason})"
        ) from exc


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "")


def _annotated_description(annotation: Any) -> bool:
    if typing.get_origin(annotation) is not typing.Annotated:
        return False
    return any(
        isinstance(meta, FieldInfo) and meta.description for meta in typing.get_args(annotation)
    )


def _has_type_information(schema: Mapping[str, Any]) -> bool:
    keys = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref"}
    return bool(keys & set(schema))


def where_defined(func: Callable[..., Any]) -> str:
    module = getattr(func, "__module__", "?")
    qualname = getattr(func, "__qualname__", getattr(func, "__name__", "?"))
    return f"{module}.{qualname}"


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[_-]+", name) if part)
