"""What a tool is: the spec the registry keeps, the executor runs and the model is offered.

A Python function becomes a ToolSpec in tools/definition.py; an MCP server's
tool in tools/mcp/specs.py. The registry (tools/registry.py) keeps them by name.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tools.arguments import ArgumentsInvalid, ToolArguments
from tools.context import ToolContext

logger = logging.getLogger(__name__)

TOOL_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
DEFAULT_TIMEOUT_S = 30.0


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
        """This tool as one entry of the OpenAI `tools` request parameter (a new object each time)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": json.loads(self._parameters_json),
            },
        }

    @functools.cached_property
    def _parameters_json(self) -> str:
        # Decoded for every request (twice a turn, every tool): a copy its caller may
        # change, at a third of what copy.deepcopy took.
        return json.dumps(self.parameters)

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
