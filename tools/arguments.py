"""How a tool checks a call's arguments: the protocol, and the pydantic kind for Python tools.

A Python tool's arguments are checked by the pydantic model made from its
type hints (`ModelArguments`, built in tools/definition.py); an MCP tool's by
its JSON Schema (tools/mcp/specs.py). Either way a mistake is
`ArgumentsInvalid`, one `{field, message}` per mistake, which the executor
sends back to the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError


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
