"""toolchat's Django project: settings, ASGI entry point, Celery app and URLs."""

from project.celery import app as celery_app

__all__ = ["celery_app"]
