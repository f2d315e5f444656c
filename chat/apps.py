from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = "Chat"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the tasks with the Celery app, so that the in-process
        # dispatcher (no broker) finds them by name as a worker would.
        from django.db.backends.signals import connection_created

        from chat import tasks  # noqa: F401
        from chat.database import prepared_statements_guard
        from chat.llm.endpoints import configured

        # A prepared statement that a migration made stale is prepared anew.
        connection_created.connect(prepared_statements_guard)

        # The providers file (TOOLCHAT_PROVIDERS) is checked when the process starts: a
        # mistake stops it with a message naming the provider and the key.
        configured()
