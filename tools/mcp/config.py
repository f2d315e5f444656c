"""The MCP servers toolchat connects to: `TOOLCHAT_MCP_CONFIG`, read and checked.

The file is the `mcpServers` JSON that Claude Desktop, Cursor and VS Code
read: `command`/`args`/`env` (and `cwd`) start a server over stdio, `url`/
`headers` reach one over streamable HTTP. toolchat adds four optional keys per
server: `enabled`, `allowTools`, `requiresApproval` and `timeout`.

Secrets stay out of the file: `${NAME}` in `env`, `headers`, `url` or `args`
is replaced by the environment variable NAME when the file is read (a missing
one is a configuration error). Nothing here connects to a server; the file is
checked when the app starts, and every mistake is an ImproperlyConfigured
naming the server and the key (never a secret's value).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from django.core.exceptions import ImproperlyConfigured

from project.config_file import EnvironmentFiller, json_file_read, redacted, url_without_secrets
from tools.spec import DEFAULT_TIMEOUT_S

# A server's name prefixes its tools' names (`<server>__<tool>`), which OpenAI
# limits to [a-zA-Z0-9_-]{1,64}; "__" is the separator, so a name may not hold it.
SERVER_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9-]*(?:_[a-zA-Z0-9-]+)*$")
SERVER_NAME_MAX = 32

# Keys other clients write into the same file; accepted so that a file can be shared.
_FOREIGN_KEYS = frozenset({"type", "transport", "description", "disabled", "autoApprove"})
_KEYS = frozenset(
    {"command", "args", "env", "cwd", "url", "headers"}
    | {"enabled", "allowTools", "requiresApproval", "timeout"}
)
_TYPES = {
    "stdio": "stdio",
    "http": "http",
    "streamable-http": "http",
    "streamable_http": "http",
    "streamableHttp": "http",
}


@dataclass(frozen=True)
class McpServerConfig:
    """One server of the file, checked, its `${VARIABLES}` filled in."""

    name: str
    transport: Literal["stdio", "http"]
    command: str = field(default="", repr=False)
    args: tuple[str, ...] = field(default=(), repr=False)
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None
    url: str = field(default="", repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    enabled: bool = True
    # None: every tool the server lists; otherwise only these (the server's own names).
    allow_tools: frozenset[str] | None = None
    # True or False for every tool, or the names of the tools whose calls need approval.
    requires_approval: bool | frozenset[str] = False
    timeout: float = DEFAULT_TIMEOUT_S
    # The command line or URL as the file writes it, `${VARIABLES}` unfilled.
    written: str = ""
    # The values filled in for `${VARIABLES}`, and the headers': never shown (`redact`).
    secrets: frozenset[str] = field(default=frozenset(), repr=False)

    def redact(self, text: str) -> str:
        """A message without this server's secrets: filled-in values, header values, and
        the credentials and query of any URL in it."""
        return redacted(text, self.secrets)

    def tool_requires_approval(self, tool: str) -> bool:
        """Whether calls of the server's tool `tool` wait for their owner's approval."""
        if isinstance(self.requires_approval, bool):
            return self.requires_approval
        return tool in self.requires_approval

    def allows(self, tool: str) -> bool:
        """Whether the server's tool `tool` is offered at all."""
        return self.allow_tools is None or tool in self.allow_tools

    @property
    def where(self) -> str:
        """Where the server is, for logs and the API: its command or its URL, no secrets.

        Written as in the file, before `${VARIABLES}` are filled in, and a URL
        without its user, password, query and fragment.
        """
        if self.transport == "stdio":
            return self.written[:200]
        return url_without_secrets(self.written)


def load_config(path: str | os.PathLike[str] | None) -> list[McpServerConfig]:
    """The servers of the file at `path` (none when it is empty or None), in file order."""
    if not path:
        return []
    label = f"TOOLCHAT_MCP_CONFIG={str(path)!r}"
    document = json_file_read(path, label)
    return parse_config(document, label=label, environ=os.environ)


def parse_config(
    document: Any, *, label: str = "TOOLCHAT_MCP_CONFIG", environ: Mapping[str, str]
) -> list[McpServerConfig]:
    """The servers of an `{"mcpServers": {...}}` document."""
    if not isinstance(document, dict) or not isinstance(document.get("mcpServers"), dict):
        raise ImproperlyConfigured(
            f'{label}: expected a JSON object {{"mcpServers": {{"<name>": {{...}}}}}}.'
        )
    servers = []
    for name, entry in document["mcpServers"].items():
        servers.append(_server(name, entry, label=label, environ=environ))
    return servers


def _server(name: str, entry: Any, *, label: str, environ: Mapping[str, str]) -> McpServerConfig:
    where = f"{label}: server {name!r}"
    transport = _shape_check(name, entry, where)
    filler = EnvironmentFiller(where, environ)
    options = _options(entry, where)
    if transport == "stdio":
        return _stdio_server(name, entry, where, filler, options)
    return _http_server(name, entry, where, filler, options)


def _shape_check(name: str, entry: Any, where: str) -> Literal["stdio", "http"]:
    """The checks every entry passes: its name, its keys, and one way to reach it."""
    if not (SERVER_NAME_RE.match(name) and len(name) <= SERVER_NAME_MAX):
        raise ImproperlyConfigured(
            f"{where}: a server name is letters, digits, - and single _ (no '__', which "
            f"separates it from its tools' names), at most {SERVER_NAME_MAX} characters."
        )
    if not isinstance(entry, dict):
        raise ImproperlyConfigured(f"{where}: expected an object with `command` or `url`.")
    unknown = sorted(set(entry) - _KEYS - _FOREIGN_KEYS)
    if unknown:
        raise ImproperlyConfigured(
            f"{where}: unknown key(s) {', '.join(unknown)}; the keys are "
            f"{', '.join(sorted(_KEYS))}."
        )
    command, url = entry.get("command"), entry.get("url")
    if (command is None) == (url is None):
        raise ImproperlyConfigured(
            f"{where}: give either `command` (a server started over stdio) or `url` "
            "(a server reached over streamable HTTP)."
        )
    declared = entry.get("type", entry.get("transport"))
    transport: Literal["stdio", "http"] = "stdio" if command is not None else "http"
    if declared is not None and _TYPES.get(str(declared)) != transport:
        raise ImproperlyConfigured(
            f"{where}: type {declared!r} is not supported with "
            f"{'command' if command is not None else 'url'}; toolchat speaks stdio "
            "(command) and streamable HTTP (url), not SSE."
        )
    return transport


def _stdio_server(
    name: str,
    entry: Mapping[str, Any],
    where: str,
    filler: EnvironmentFiller,
    options: dict[str, Any],
) -> McpServerConfig:
    command = entry["command"]
    if not isinstance(command, str) or not command.strip():
        raise ImproperlyConfigured(f"{where}: command must be a non-empty string.")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ImproperlyConfigured(f"{where}: args must be a list of strings.")
    cwd = entry.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ImproperlyConfigured(f"{where}: cwd must be a string.")
    return McpServerConfig(
        name=name,
        transport="stdio",
        command=filler.fill(command, "command"),
        args=tuple(filler.fill(a, "args") for a in args),
        env=filler.strings(entry, "env"),
        cwd=cwd,
        written=" ".join([command, *args]),
        secrets=frozenset(filler.secrets),
        **options,
    )


def _http_server(
    name: str,
    entry: Mapping[str, Any],
    where: str,
    filler: EnvironmentFiller,
    options: dict[str, Any],
) -> McpServerConfig:
    url = entry["url"]
    if not isinstance(url, str) or not re.match(r"^https?://[^\s/]+", filler.fill(url, "url")):
        raise ImproperlyConfigured(f"{where}: url must be an http:// or https:// URL.")
    headers = filler.strings(entry, "headers")
    # A header's value is a credential more often than not (Authorization, X-Api-Key).
    filler.secrets.update(value.split(" ", 1)[-1] for value in headers.values())
    return McpServerConfig(
        name=name,
        transport="http",
        url=filler.fill(url, "url"),
        headers=headers,
        written=url,
        secrets=frozenset(filler.secrets),
        **options,
    )


def _options(entry: Mapping[str, Any], where: str) -> dict[str, Any]:
    enabled = entry.get("enabled", not entry.get("disabled", False))
    if not isinstance(enabled, bool):
        raise ImproperlyConfigured(f"{where}: enabled must be true or false.")
    allow = entry.get("allowTools")
    if allow is not None and (
        not isinstance(allow, list) or not all(isinstance(t, str) for t in allow)
    ):
        raise ImproperlyConfigured(f"{where}: allowTools must be a list of tool names.")
    approval = entry.get("requiresApproval", False)
    if not isinstance(approval, bool) and not (
        isinstance(approval, list) and all(isinstance(t, str) for t in approval)
    ):
        raise ImproperlyConfigured(
            f"{where}: requiresApproval must be true, false or a list of tool names."
        )
    timeout = entry.get("timeout", DEFAULT_TIMEOUT_S)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not (math.isfinite(timeout) and timeout > 0)
    ):
        raise ImproperlyConfigured(f"{where}: timeout must be a positive number of seconds.")
    return {
        "enabled": enabled,
        "allow_tools": frozenset(allow) if allow is not None else None,
        "requires_approval": approval if isinstance(approval, bool) else frozenset(approval),
        "timeout": float(timeout),
    }
