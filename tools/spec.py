"""What a tool is: its options, its spec, and how a Python function becomes one.

`build_spec` is the one place that reads a tool's options and checks its
function: the parameters' JSON Schema comes from the type hints through
pydantic, the description from the docstring, and every mistake in a
definition is a `ToolDefinitionError` naming the tool. The registry
(tools/registry.py) keeps the specs by name.
"""

from __future__ import annotations

import copy
import inspect
import logging
import math
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, Unpack

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model
from pydantic.fields import FieldInfo

from tools.context import ToolContext
from tools.docstrings import first_paragraph, parse_args_section
from tools.schema import clean_schema

logger = logging.getLogger(__name__)

TOOL_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
DEFAULT_TIMEOUT_S = 30.0


class ToolDefinitionError(TypeError):
    """A tool is misdefined; raised while its module is imported."""


class ArgumentsInvalid(ValueError):
    """A call's arguments do not fit the tool's parameters: one `{field, message}` per mistake."""

    def __init__(self, errors: list[dict[str, str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{e['field']}: {e['message']}" for e in errors))


class ToolArguments(Protocol):
    """How a tool checks a call's decoded arguments and turns them into keyword arguments."""

    @property
    def param_names(self) -> list[str]: ...

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments for the tool's function; ArgumentsInvalid when they do not fit."""
        ...


@dataclass(frozen=True)
class ModelArguments:
    """A Python tool's parameters, checked by the pydantic model made from its type hints."""

    model: type[BaseModel]
    # Parameter name -> the field of `model` that holds it. Fields have neutral
    # names and the parameter name as alias, so that a parameter may be called
    # `json`, `schema` or `model_name` without clashing with BaseModel.
    fields: Mapping[str, str]

    @property
    def param_names(self) -> list[str]:
        return list(self.fields)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        try:
            instance = self.model.model_validate(arguments)
        except ValidationError as exc:
            raise ArgumentsInvalid(
                [
                    {
                        "field": ".".join(str(part) for part in error["loc"]) or "(arguments)",
                        "message": error["msg"],
                    }
                    for error in exc.errors(
                        include_url=False, include_input=False, include_context=False
                    )
                ]
            ) from exc
        # Not model_dump(): a nested model must reach the tool as the model itself.
        return {param: getattr(instance, field) for param, field in self.fields.items()}


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


@dataclass(frozen=True)
class ToolSpec:
    """Everything known about one registered tool."""

    name: str
    description: str
    func: Callable[..., Any]
    is_async: bool
    parameters: dict[str, Any]
    arguments: ToolArguments
    context_param: str
    context_by_keyword: bool
    timeout: float
    idempotent: bool
    return_direct: bool
    requires_approval: bool  # may a call of it need approval (always, or by `approval_rule`)
    approval_rule: Callable[[Mapping[str, Any]], bool] | None
    describe: Callable[[Mapping[str, Any]], str] | None
    sensitive: frozenset[str]
    # The MCP server the tool comes from (tools/mcp/); "" for a Python tool.
    server: str = ""

    def needs_approval(self, arguments: Any) -> bool:
        """Whether this call (its decoded arguments) waits for its owner's approval.

        A call whose arguments the tool would refuse (not a JSON object, or not
        valid for its parameters) needs none: the executor answers it with the
        error and the tool never runs. For a valid call, a rule that fails asks
        for approval: the cautious answer.
        """
        if not self.requires_approval:
            return False
        if not isinstance(arguments, Mapping):
            return False
        try:
            self.validate_arguments(arguments)
        except ArgumentsInvalid:
            return False
        if self.approval_rule is None:
            return True
        try:
            return bool(self.approval_rule(arguments))
        except Exception:
            logger.warning("the approval rule of %s failed; asking for approval", self.name)
            return True

    def describe_call(self, arguments: Any) -> str:
        """One line saying what a call will do (from its masked arguments)."""
        if self.describe is not None and isinstance(arguments, Mapping):
            try:
                return " ".join(str(self.describe(arguments)).split())[:500]
            except Exception:
                logger.warning("the describe hook of %s failed", self.name)
        if isinstance(arguments, Mapping):
            shown = ", ".join(f"{key}={value!r}" for key, value in arguments.items())
        else:
            shown = repr(arguments)
        return f"{self.name}({shown})"[:500]

    @property
    def param_names(self) -> list[str]:
        """The tool's parameters as the model names them, in signature order."""
        return self.arguments.param_names

    def openai_tool(self) -> dict[str, Any]:
        """This tool as one entry of the OpenAI `tools` request parameter."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(self.parameters),
            },
        }

    def validate_arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validate decoded arguments and return the keyword arguments for the function.

        Raises ArgumentsInvalid with one entry per bad field.
        """
        return self.arguments.validate(arguments)

    def bind(self, context: ToolContext, kwargs: Mapping[str, Any]) -> Any:
        """Call the function with the context and validated arguments (a coroutine if async)."""
        if self.context_by_keyword:
            return self.func(**{self.context_param: context}, **kwargs)
        return self.func(context, **kwargs)


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
    approval = options.get("requires_approval", False)
    if not isinstance(approval, bool) and not callable(approval):
        raise ToolDefinitionError(
            f"{label}: requires_approval must be True, False or a function of the arguments."
        )
    describe = options.get("describe")
    if describe is not None and not callable(describe):
        raise ToolDefinitionError(f"{label}: describe must be a function of the arguments.")

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
        field = f"p{index}"
        field_definitions[field] = (annotation, Field(**field_options))
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
