from django.apps import AppConfig
from django.conf import settings


class ToolsConfig(AppConfig):
    name = "tools"
    verbose_name = "Tools"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Import the tool modules listed in TOOLCHAT_TOOL_MODULES, so their tools register."""
        from tools.registry import load_tool_modules

        load_tool_modules(getattr(settings, "TOOLCHAT_TOOL_MODULES", []))
