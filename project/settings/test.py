"""Test settings: only speed-ups and isolation on top of base."""

import os

os.environ.setdefault("DJANGO_DEBUG", "0")
os.environ.setdefault("DJANGO_SECRET_KEY", "test-secret-key-not-for-production")
os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "testserver,localhost,127.0.0.1")
os.environ.setdefault("DJANGO_SECURE_SSL_REDIRECT", "0")
os.environ.setdefault("LLM_PROVIDER", "offline")

from project.settings.base import *  # noqa: F403
from project.settings.base import STORAGES

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    **STORAGES,
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
SERVESTATIC_AUTOREFRESH = True
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    # A file, not Django's shared-cache in-memory default: background task
    # threads write concurrently, which shared cache answers with "table is
    # locked" at once, while a file in WAL mode waits for the lock like
    # `make run` does.
    import tempfile

    DATABASES["default"]["TEST"] = {  # noqa: F405
        "NAME": os.path.join(tempfile.gettempdir(), f"toolchat-test-{os.getpid()}.sqlite3")
    }

# Test-only tools (slow, crashing, return_direct) beside the built-in ones.
TOOLCHAT_TOOL_MODULES = [*TOOLCHAT_TOOL_MODULES, "tests.chat.engine.slow_tools"]  # noqa: F405

# No background sweep for lost runs in test processes (importing project.asgi
# would start one against whatever database is configured at that moment);
# the tests call runs_recover() themselves.
if not os.environ.get("TOOLCHAT_RECOVER_S"):
    TOOLCHAT_RECOVER_S = 0.0

# No grace after a database restart (the tests' PostgreSQL has just started, and
# tests that make a lease stale mean it to be); the outage test sets its own.
if not os.environ.get("TOOLCHAT_RESTART_GRACE_S"):
    TOOLCHAT_RESTART_GRACE_S = 0.0

# The offline model streams at once in tests (a test of the pacing sets its own).
if not os.environ.get("TOOLCHAT_OFFLINE_WORD_DELAY_MS"):
    TOOLCHAT_OFFLINE_WORD_DELAY_MS = 0
