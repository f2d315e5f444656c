"""`@tool` and the registry: the app's tools by name, and the modules that define them.

A decorated function is checked and described by `build_spec` (tools/definition.py)
while its module is imported; a mistake is a `ToolDefinitionError` naming the
tool.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol, TypeVar, Unpack, overload

from django.core.exceptions import ImproperlyConfigured

from tools.definition import ToolDefinitionError, ToolOptions, build_spec, where_defined
from tools.spec import TOOL_NAME_RE, ToolSpec

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "TOOL_NAME_RE",
    "ToolDefinitionError",
    "ToolOptions",
    "ToolRegistry",
    "ToolSource",
    "ToolSpec",
    "load_tool_modules",
    "registry",
    "tool",
]


class ToolSource(Protocol):
    """Tools registered from elsewhere than Python code: an MCP server's (tools/mcp/)."""

    def specs(self) -> list[ToolSpec]: ...

    def get(self, name: str) -> ToolSpec | None: ...


class ToolRegistry:
    """A set of tools by name. The module-level `registry` is the one the app uses.

    Python tools are registered with `@tool`; sources (MCP servers) add theirs
    beside them. A Python tool's name wins over a source's.
    """

    def __init__(self) -> None:
        self._specs: dict[str, ToolSpec] = {}
        self._sources: list[ToolSource] = []

    def add_source(self, source: ToolSource) -> None:
        """Offer a source's tools beside the registered ones."""
        self._sources.append(source)

    def remove_source(self, source: ToolSource) -> None:
        """Stop offering a source's tools."""
        self._sources.remove(source)

    @overload
    def tool(self, func: F, /) -> F: ...

    @overload
    def tool(self, /, **options: Unpack[ToolOptions]) -> Callable[[F], F]: ...

    def tool(
        self, func: Callable[..., Any] | None = None, /, **options: Unpack[ToolOptions]
    ) -> Any:
        """Register the decorated function as a tool; usable bare or with options."""

        def decorate(fn: F) -> F:
            self.register(fn, _localns=_caller_locals(), **options)
            return fn

        if func is not None:
            self.register(func, _localns=_caller_locals())
            return func
        return decorate

    def register(
        self,
        func: Callable[..., Any],
        *,
        _localns: Mapping[str, Any] | None = None,
        **options: Unpack[ToolOptions],
    ) -> ToolSpec:
        """Register a function as a tool without the decorator syntax."""
        spec = build_spec(func, localns=_localns, **options)
        existing = self._specs.get(spec.name)
        if existing is not None:
            raise ToolDefinitionError(
                f"Tool {spec.name!r} is defined twice: in {where_defined(existing.func)} "
                f"and in {where_defined(func)}. Tool names must be unique; pass name=... to rename one."
            )
        self._specs[spec.name] = spec
        return spec

    def get(self, name: str) -> ToolSpec | None:
        """The tool called `name`, or None."""
        spec = self._specs.get(name)
        if spec is None:
            for source in self._sources:
                spec = source.get(name)
                if spec is not None:
                    return spec
        return spec

    def names(self) -> list[str]:
        """The registered tool names, in registration order (sources' tools last)."""
        return [spec.name for spec in self.specs()]

    def specs(self) -> list[ToolSpec]:
        """The registered tools, in registration order (sources' tools last)."""
        specs = list(self._specs.values())
        for source in self._sources:
            specs.extend(spec for spec in source.specs() if spec.name not in self._specs)
        return specs

    def openai_tools(self, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The OpenAI `tools` request parameter for the named tools (all when None)."""
        if names is None:
            return [spec.openai_tool() for spec in self.specs()]
        wanted = list(names)
        found = {name: self.get(name) for name in wanted}
        unknown = [name for name, spec in found.items() if spec is None]
        if unknown:
            raise LookupError(
                f"Unknown tool(s) {', '.join(map(repr, unknown))}; "
                f"registered: {', '.join(self.names()) or 'none'}."
            )
        return [spec.openai_tool() for spec in found.values() if spec is not None]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self.specs())

    def __len__(self) -> int:
        return len(self.specs())


registry = ToolRegistry()
tool = registry.tool


def load_tool_modules(modules: Iterable[str]) -> None:
    """Import each tool module so that its `@tool` functions register themselves."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            # Only when the listed module (or a package above it) is what is missing;
            # a missing import inside the module is that module's failure.
            if exc.name and (module == exc.name or module.startswith(f"{exc.name}.")):
                raise ImproperlyConfigured(
                    f"TOOLCHAT_TOOL_MODULES lists {module!r}, which does not exist."
                ) from exc
            raise ImproperlyConfigured(
                f"TOOLCHAT_TOOL_MODULES: the tool module {module!r} failed to import: {exc}"
            ) from exc
        except Exception as exc:
            raise ImproperlyConfigured(
                f"TOOLCHAT_TOOL_MODULES: the tool module {module!r} failed to import: "
                f"{type(exc).__name__}: {exc}"
            ) from exc


def _caller_locals() -> dict[str, Any] | None:
    # Tools defined inside a function (tests, factories) name types that only the
    # defining frame can resolve; pydantic looks there for the same reason. Frame 2
    # is the one that applied the decorator: both `tool(fn)` and `decorate(fn)`
    # are called straight from it.
    try:
        frame = sys._getframe(2)
    except ValueError:
        return None
    if frame.f_code.co_name == "<module>":
        return None
    return dict(frame.f_locals)
