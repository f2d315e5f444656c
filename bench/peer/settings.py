"""The peer's Django project: django-ai-assistant and nothing else, on a SQLite file.

Used by bench/peer/turns.py, under its own virtualenv (bench/peer/README.md).
"""

import os

SECRET_KEY = "peer-bench-not-a-secret-0123456789abcdefghijklmnopqrstuvwxyz"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django_ai_assistant",
]
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["PEER_DATABASE"]}
}
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
