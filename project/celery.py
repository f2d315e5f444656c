"""The Celery app, configured from Django settings (namespace CELERY)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings.base")

app = Celery("toolchat")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect
def schedule_recovery(sender: Celery, **kwargs: object) -> None:
    """Celery beat re-queues runs whose workers died (chat.engine.recovery.runs_recover)."""
    from django.conf import settings

    sender.add_periodic_task(settings.TOOLCHAT_RECOVER_S, sender.signature("chat.runs_recover"))
