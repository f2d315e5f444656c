"""Tools from MCP servers, run and audited like the Python ones (docs/tools.md).

`TOOLCHAT_MCP_CONFIG` names an `mcpServers` JSON file (tools/mcp/config.py).
At start-up the file is read and checked, and a hub (tools/mcp/hub.py) is
added to the tool registry as a source; it connects to the servers only when
their tools are first wanted. The MCP SDK is imported only when a file is set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tools.registry import registry

if TYPE_CHECKING:
    from tools.mcp.config import McpServerConfig
    from tools.mcp.hub import McpHub

_hub: McpHub | None = None


def configure(servers: Sequence[McpServerConfig], **options: Any) -> McpHub | None:
    """Offer these servers' tools in the app's registry, in place of any offered before."""
    global _hub
    unconfigure()
    if not servers:
        return None
    from tools.mcp.hub import McpHub

    _hub = McpHub(servers, **options)
    registry.add_source(_hub)
    return _hub


def unconfigure() -> None:
    """Stop offering MCP tools and close the connections (stdio servers are stopped)."""
    global _hub
    hub, _hub = _hub, None
    if hub is not None:
        registry.remove_source(hub)
        hub.close()


def active_hub() -> McpHub | None:
    """The hub of the configured servers, or None when there are none."""
    return _hub


def configure_from_settings() -> McpHub | None:
    """Read TOOLCHAT_MCP_CONFIG and offer its servers' tools (ImproperlyConfigured on a mistake)."""
    from django.conf import settings

    from tools.mcp.config import load_config

    servers = load_config(getattr(settings, "TOOLCHAT_MCP_CONFIG", ""))
    return configure(
        servers,
        connect_timeout=settings.TOOLCHAT_MCP_CONNECT_TIMEOUT_S,
        refresh_s=settings.TOOLCHAT_MCP_REFRESH_S,
        retry_s=settings.TOOLCHAT_MCP_RETRY_S,
    )
