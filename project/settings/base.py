"""Django's settings and the services toolchat runs on, read from the environment.

toolchat's own knobs (the turn engine's timings, WebSocket limits, the model
providers, tools and limits) are in project/settings/toolchat.py, imported at
the end; the env_* readers are in project/settings/env.py.

The defaults are the embedded ones of `make run`: SQLite, an in-memory channel
layer, tasks run in-process, and the offline model. Production sets
DATABASE_URL, REDIS_URL and DJANGO_SECRET_KEY (see README.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from project.settings.env import env_bool, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent.parent


# --- Core -------------------------------------------------------------------

DEBUG = env_bool("DJANGO_DEBUG", default=False)

SECRET_KEY = env_str("DJANGO_SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set. Set it to a long random string in production "
            "(python -c 'import secrets; print(secrets.token_urlsafe(50))'), "
            "or set DJANGO_DEBUG=1 for local development."
        )
    # Only reachable with DEBUG on: a fixed key is fine for a developer's machine.
    SECRET_KEY = "django-insecure-toolchat-development-key-do-not-use-in-production"  # noqa: S105

ALLOWED_HOSTS = env_list(
    "DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else []
)
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # Before staticfiles: its configuration checks run, and runserver leaves static files to it.
    "servestatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "tools",
    "chat",
]

# The audit row of a tool's execution, which a resource names as what created it: the
# `tools` framework names the model only through this setting (as Django's auth does
# AUTH_USER_MODEL), so neither its code nor its migrations name the app built on it.
TOOLS_EXECUTION_MODEL = "chat.ToolExecution"

# Three of Django's middleware through project/middleware.py: their hooks run on
# the event loop under ASGI, not through a thread hand-off each. The security,
# session, CSRF and clickjacking ones keep Django's paths: the deploy checks
# look for those by name.
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # ServeStatic (a maintained WhiteNoise fork) is async-capable: with it every
    # middleware is, so async views (?wait=true, SSE) hold no thread while they wait.
    "servestatic.middleware.ServeStaticMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "project.middleware.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "project.middleware.AuthenticationMiddleware",
    "project.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # A request's W3C traceparent, continued by the turn it starts (docs/observability.md).
    "chat.telemetry.middleware.TraceContextMiddleware",
]

ROOT_URLCONF = "project.urls"
ASGI_APPLICATION = "project.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------

DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}")
# Checks whose warning would only be noise here; each is added below with its reason.
SILENCED_SYSTEM_CHECKS: list[str] = []

DATABASES: dict[str, dict[str, Any]] = {
    "default": dict(dj_database_url.parse(DATABASE_URL, conn_max_age=0, conn_health_checks=True))
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the web process read while a worker thread writes; the busy timeout
    # makes a writer wait for the lock instead of failing at once.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
    # CONN_MAX_AGE stays 0: Django's per-request threads under ASGI would each leave
    # a kept connection to the garbage collector. The process's own threads keep
    # theirs instead (opening one costs 1.5 to 4 ms): the requests' kept threads
    # (project/request_threads.py), the task and socket pools (chat/database.py).
    # The covering indexes' INCLUDE columns (PostgreSQL's index-only scans) are
    # simply not there on SQLite; the warning says nothing a user can act on.
    SILENCED_SYSTEM_CHECKS.append("models.W040")
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env_bool(
    "DATABASE_POOL", default=True
):
    # psycopg 3's pool (Django 5.1+). Pooled connections must not also be persistent;
    # with CONN_HEALTH_CHECKS (above) Django has the pool check a connection when
    # it is taken, so one that a database restart broke is replaced, not used.
    # Beside the URL's own options (?sslmode=require, for a managed PostgreSQL).
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": env_int("DATABASE_POOL_MIN_SIZE", 1),
        # A task thread holds a connection only while it queries (it gives it
        # back before waiting on a model or a tool): threads may outnumber it.
        "max_size": env_int("DATABASE_POOL_MAX_SIZE", 20),
        "timeout": 10,
        # A reconnection that keeps failing (the database is down) starts over
        # after 5 s, where psycopg's default doubles its wait for 5 minutes:
        # so the pool is back within seconds of the database, not a minute.
        "reconnect_timeout": 5,
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env_bool(
    "DATABASE_PREPARED_STATEMENTS", default=True
):
    # A statement a connection has run five times (psycopg's default threshold) is
    # prepared: PostgreSQL parses and plans it once, not at every run. A turn runs
    # the same statements each time, and planning them was a third of
    # PostgreSQL's CPU per turn (docs/performance.md, round twelve). It needs
    # psycopg's server-side binding (values sent apart from the SQL), which Django
    # leaves off. A pooler that does not keep prepared statements needs 0 (PgBouncer
    # in transaction mode keeps them from 1.22, with max_prepared_statements, and
    # with a libpq of 17 or later in psycopg).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"server_side_binding": True, "prepare_threshold": 5}
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Auth, i18n, static ---------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "chat:index"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
# Dates and times in the admin: ISO order, 24-hour, with the zone (project/formats/en/).
FORMAT_MODULE_PATH = ["project.formats"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# Where collectstatic writes and ServeStatic serves from; the test servers use their own.
STATIC_ROOT = Path(env_str("DJANGO_STATIC_ROOT", str(BASE_DIR / "staticfiles")))
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "project.staticfiles.ManifestStaticFilesStorage"
        )
    },
}
# With DEBUG on, ServeStatic serves files straight from the apps' static folders.
SERVESTATIC_USE_FINDERS = DEBUG

# --- Security (production) ------------------------------------------------------

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # the chat page reads it to post with fetch()
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if not DEBUG:
    SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 60 * 60 * 24 * 30)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", default=False)
    # Health checks come over plain HTTP from inside the network.
    SECURE_REDIRECT_EXEMPT = [r"^healthz/$", r"^readyz/$"]
    # Preloading is a commitment browsers keep for months: opt in with
    # DJANGO_SECURE_HSTS_PRELOAD=1 rather than being warned into it.
    if not SECURE_HSTS_PRELOAD:
        SILENCED_SYSTEM_CHECKS.append("security.W021")

# --- Redis, Celery, Channels ------------------------------------------------------

REDIS_URL = env_str("REDIS_URL")

# channels_redis waits for messages with a blocking pop (BZPOPMIN) of 5 s
# (RedisChannelLayer.brpop_timeout; its own layer, which a Sentinel setup runs),
# while redis-py 8 gives up on any read after 5 s by default: the two race, and
# an idle receive died with redis' TimeoutError (idle sockets dropped, ?wait=true
# answered 500). The layer's connections, the subscription's among them, get a
# read timeout well above the pop and the subscription's 15 s PING; a host dict's
# other keys are passed by channels_redis to redis-py's ConnectionPool.from_url
# (options in the URL win).
CHANNEL_LAYER_SOCKET_TIMEOUT_S = 15.0

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            # channels_redis' own, its groups Redis pub/sub channels: a commit's
            # events published in one round trip, heard on one subscription a
            # web process (chat/live/redis_layer.py, chat/live/subscription.py).
            "BACKEND": "chat.live.redis_layer.RedisChannelLayer",
            "CONFIG": {
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "socket_timeout": CHANNEL_LAYER_SOCKET_TIMEOUT_S,
                        "socket_connect_timeout": 5.0,
                    }
                ]
            },
        }
    }
    # The cache holds the message rate limit's history (DRF throttles): in Redis,
    # every web process counts against the same budget. It fails open while
    # Redis is down (chat/message_rate.py).
    CACHES = {
        "default": {
            # Django's, with one pool of connections per process (project/cache.py).
            "BACKEND": "project.cache.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "toolchat",
            "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
        }
    }
else:
    # One process only; safe to publish to from the in-process task threads.
    CHANNEL_LAYERS = {"default": {"BACKEND": "chat.live.layers.ThreadSafeInMemoryChannelLayer"}}

CELERY_BROKER_URL = REDIS_URL or "memory://"
# kombu's Redis transport, except that losing Redis does not end the worker
# (project/broker.py says how and why); the worker reconnects for as long as it takes.
CELERY_BROKER_TRANSPORT = "project.broker:Transport" if REDIS_URL else None
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
# A task is acknowledged only once it has finished, and a task whose worker died
# goes back to the queue: the turn engine's tasks are idempotent for exactly this.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A task whose worker died unacknowledged goes back to the queue once it has been
# out for visibility_timeout seconds; workers look for such tasks every
# CELERY_RESTORE_INTERVAL seconds. Keep the timeout above the longest run step.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600),
    "unacked_restore_interval": env_int("CELERY_RESTORE_INTERVAL", 10),
    "unacked_restore_throttle": 1,
}
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# Without Redis there is no broker: tasks run in-process, in background threads,
# so a POST still returns at once (see chat/tasks.py).
TOOLCHAT_TASKS_IN_PROCESS = not REDIS_URL
TOOLCHAT_IN_PROCESS_WORKERS = env_int("TOOLCHAT_IN_PROCESS_WORKERS", 8)
# --- REST API ---------------------------------------------------------------------

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # 401 before 406: an anonymous client hears that it must sign in first.
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "chat.api.negotiation.AuthFirstNegotiation",
    # A JSON API: JSON in (anything else is a 415), JSON out.
    "DEFAULT_PARSER_CLASSES": ["chat.api.parsers.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["chat.api.renderers.JSONRenderer"],
    # Every error answers {"code", "message", "field"?, "details"?} (docs/api.md).
    "EXCEPTION_HANDLER": "chat.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "chat.api.schema.ApiSchema",
    "DEFAULT_THROTTLE_RATES": {
        "messages": env_str("TOOLCHAT_MESSAGE_RATE", "30/min"),
        "compare": env_str("TOOLCHAT_COMPARE_RATE", "60/min"),
    },
}
SPECTACULAR_SETTINGS = {
    "TITLE": "toolchat API",
    "DESCRIPTION": (
        "Conversations, runs, tool executions and live events of toolchat. "
        "Authenticate with `Authorization: Token <key>` (`manage.py drf_create_token USER`) "
        "or the session. Errors answer `{code, message, field?, details?}`. "
        "A walkthrough: docs/api.md."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    # Request and response bodies as separate components: read-only fields stay out of requests.
    "COMPONENT_SPLIT_REQUEST": True,
    # Several operations share a URL (GET and POST /conversations/); see chat/api/base.py.
    "PREPROCESSING_HOOKS": ["chat.api.schema.expand_routes"],
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "chat.models.RunStatus",
        "ExecutionStatusEnum": "chat.models.ExecutionStatus",
        "ModelCallStatusEnum": "chat.models.CallStatus",
        "ReplayToolsEnum": "chat.models.ReplayTools",
        "ReplayModeEnum": "chat.models.ReplayMode",
    },
}

# --- Logging --------------------------------------------------------------------------

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django": {"level": env_str("DJANGO_LOG_LEVEL", "INFO")},
        # httpx2 (the HTTP client of the MCP SDK and of openai) logs every request's
        # URL at INFO: an MCP server's URL may hold a token, and an HTTP MCP call
        # pings its server every second while it waits.
        "httpx2": {"level": "WARNING"},
    },
}

# --- toolchat's own settings: the turn engine, live events, models, tools ----------

from project.settings.toolchat import *  # noqa: E402, F403
