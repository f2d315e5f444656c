"""An MCP server's tools as toolchat ToolSpecs: names, schemas, arguments, options.

Each tool is offered to the model as `<server>__<tool>` with its input schema
as the server gave it. A schema the model API would reject, or that is not
valid JSON Schema, leaves that one tool out with a logged reason; the rest of
the server's tools are offered.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema import ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from mcp import types
from referencing import Registry

from tools.arguments import ArgumentsInvalid
from tools.context import ToolContext
from tools.mcp.config import McpServerConfig
from tools.schema import parameters_problem as schema_problem
from tools.spec import TOOL_NAME_RE, ToolSpec

logger = logging.getLogger("tools.mcp")

SEPARATOR = "__"
MAX_ERRORS = 20
# OpenAI takes at most 128 tools in a request; a server offering more is cut here.
MAX_TOOLS_PER_SERVER = 100
# Every model call carries every description: a longer one is cut (and logged).
MAX_DESCRIPTION_CHARS = 4_000

CallTool = Callable[[McpServerConfig, str, ToolContext, dict[str, Any]], Any]


@dataclass(frozen=True)
class SchemaArguments:
    """An MCP tool's parameters, checked against its JSON Schema."""

    schema: Mapping[str, Any]
    validator: Validator = field(repr=False)

    @property
    def param_names(self) -> list[str]:
        properties = self.schema.get("properties")
        return list(properties) if isinstance(properties, dict) else []

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        errors = sorted(
            self.validator.iter_errors(dict(arguments)), key=lambda e: [str(p) for p in e.path]
        )
        if errors:
            raise ArgumentsInvalid([_error(error) for error in errors[:MAX_ERRORS]])
        return dict(arguments)


def _error(error: ValidationError) -> dict[str, str]:
    path = [str(part) for part in error.absolute_path]
    # A missing property is that property's mistake, as a Python tool reports it.
    missing = re.match(r"^'(.+)' is a required property$", error.message)
    if error.validator == "required" and missing:
        path.append(missing.group(1))
    return {"field": ".".join(path) or "(arguments)", "message": error.message[:300]}


@dataclass
class Listing:
    """The specs made from one listing of a server's tools, and the tools left out."""

    specs: dict[str, ToolSpec] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # the server's tool name -> why


def build_specs(config: McpServerConfig, tools: list[types.Tool], call: CallTool) -> Listing:
    """The ToolSpecs of a server's listed tools, by their namespaced names."""
    listing = Listing()
    for tool in tools:
        if not config.allows(tool.name):
            continue
        if len(listing.specs) >= MAX_TOOLS_PER_SERVER:
            listing.skipped[tool.name] = (
                f"the server offers over {MAX_TOOLS_PER_SERVER} tools; choose some with allowTools"
            )
            continue
        reason = parameters_problem(tool.input_schema)
        if reason is not None:
            listing.skipped[tool.name] = reason
            logger.warning(
                "MCP server %s: tool %r is not offered to the model: %s",
                config.name,
                tool.name,
                reason,
            )
            continue
        name = qualified_name(config.name, tool.name, taken=listing.specs)
        listing.specs[name] = _spec(config, tool, name, call)
    if config.allow_tools is not None:
        missing = sorted(config.allow_tools - {tool.name for tool in tools})
        if missing:
            logger.warning(
                "MCP server %s: allowTools names %s, which it does not list",
                config.name,
                ", ".join(missing),
            )
    if len(listing.skipped) > 0 and len(tools) > MAX_TOOLS_PER_SERVER:
        logger.warning(
            "MCP server %s lists %d tools; only the first %d are offered (use allowTools)",
            config.name,
            len(tools),
            MAX_TOOLS_PER_SERVER,
        )
    return listing


def qualified_name(server: str, tool: str, *, taken: Mapping[str, Any] = {}) -> str:
    """`<server>__<tool>`, made a valid OpenAI function name and unique among `taken`."""
    name = f"{server}{SEPARATOR}{tool}"
    if TOOL_NAME_RE.match(name) and name not in taken:
        return name
    # MCP allows dots, slashes and 128 characters; OpenAI does not. A short hash
    # of the original keeps two cleaned-up names apart.
    cleaned = re.sub(r"[^a-zA-Z0-9_-]", "_", tool)
    for salt in range(100):
        digest = hashlib.sha256(f"{tool}{salt or ''}".encode()).hexdigest()[:6]
        name = f"{server}{SEPARATOR}{cleaned}"[:57] + f"_{digest}"
        if name not in taken:
            return name
    raise ValueError(f"no free name for the tool {tool!r} of {server!r}")  # pragma: no cover


def parameters_problem(schema: Any) -> str | None:
    """Why a tool's input schema cannot be sent to the model as its parameters, or None."""
    return schema_problem(schema, "its inputSchema")


def _spec(config: McpServerConfig, tool: types.Tool, name: str, call: CallTool) -> ToolSpec:
    schema = tool.input_schema
    # An empty registry: a `$ref` resolves inside the schema, never over the network.
    validator = validator_for(schema)(schema, registry=Registry())
    annotations = tool.annotations
    # An MCP server's hints are its own claims; only "safe to repeat" is taken from
    # them (a call interrupted by a dead worker is then run again, not abandoned).
    idempotent = bool(annotations and (annotations.read_only_hint or annotations.idempotent_hint))
    description = (tool.description or tool.title or "").strip() or (
        f"The {tool.name} tool of the {config.name} MCP server."
    )
    if len(description) > MAX_DESCRIPTION_CHARS:
        logger.warning(
            "MCP server %s: the description of %r is %d characters; cut to %d",
            config.name,
            tool.name,
            len(description),
            MAX_DESCRIPTION_CHARS,
        )
        description = description[: MAX_DESCRIPTION_CHARS - 1] + "…"
    remote_name = tool.name

    def run(context: ToolContext, /, **arguments: Any) -> Any:
        return call(config, remote_name, context, arguments)

    run.__name__ = name
    run.__qualname__ = f"mcp:{config.name}/{remote_name}"
    return ToolSpec(
        name=name,
        description=description,
        func=run,
        is_async=False,
        parameters=dict(schema),
        arguments=SchemaArguments(schema, validator),
        context_param="context",
        context_by_keyword=False,
        timeout=config.timeout,
        idempotent=idempotent,
        return_direct=False,
        requires_approval=config.tool_requires_approval(remote_name),
        approval_rule=None,
        describe=None,
        sensitive=frozenset(),
        server=config.name,
    )
