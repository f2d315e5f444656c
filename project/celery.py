"""The Celery app, configured from Django settings (namespace CELERY)."""

import os

from celery import Celery
from celery.signals import (
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings.base")

app = Celery("toolchat")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
def telemetry_start(**kwargs: object) -> None:
    """Each pool process makes its own tracer after the fork: the parent's export thread is gone."""
    from chat.telemetry.provider import tracing_start

    tracing_start()


@worker_ready.connect
@worker_process_init.connect
def loaded_freeze(**kwargs: object) -> None:
    """A worker ready to take tasks (and each process a prefork pool starts) freezes what it loaded.

    See project/collector.py: the collector's full passes then walk only what
    the turns made, not the app's modules.
    """
    from project.collector import collector_freeze

    collector_freeze()


@worker_process_shutdown.connect
@worker_shutdown.connect
def telemetry_flush(**kwargs: object) -> None:
    """Export the spans a worker process still holds before it exits."""
    from chat.telemetry.provider import tracing_flush

    tracing_flush()


@app.on_after_configure.connect
def schedule_recovery(sender: Celery, **kwargs: object) -> None:
    """Celery beat re-queues runs whose workers died (chat.engine.recovery.runs_recover)."""
    from django.conf import settings

    sender.add_periodic_task(settings.TOOLCHAT_RECOVER_S, sender.signature("chat.runs_recover"))
