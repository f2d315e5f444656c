from django.apps import AppConfig


class ToolsConfig(AppConfig):
    name = "tools"
    verbose_name = "Tools"
    default_auto_field = "django.db.models.BigAutoField"
