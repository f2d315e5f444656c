import atexit

from django.apps import AppConfig
from django.conf import settings


class ToolsConfig(AppConfig):
    name = "tools"
    verbose_name = "Tools"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the tools: TOOLCHAT_TOOL_MODULES' Python ones, TOOLCHAT_MCP_CONFIG's servers'."""
        from tools import mcp
        from tools.registry import load_tool_modules

        load_tool_modules(getattr(settings, "TOOLCHAT_TOOL_MODULES", []))
        if mcp.configure_from_settings() is not None:
            # Stop the stdio servers with the process rather than leave them to notice.
            atexit.register(mcp.unconfigure)
