"""Settings read from the environment, each case in a fresh Python process.

Settings are evaluated once per process, so every case starts its own
interpreter with a clean environment holding only the variables it sets.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PRODUCTION_ENV = {
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
    "DJANGO_ALLOWED_HOSTS": "example.com",
    "DATABASE_URL": "postgres://toolchat:secret@db.example.com:5432/toolchat",
    "REDIS_URL": "redis://redis.example.com:6379/0",
}

# Prints the settings a case looks at, as JSON.
DUMP_SETTINGS = """
import contextlib
import json
from django.conf import settings
print(json.dumps({
    "DEBUG": settings.DEBUG,
    "DATABASES": settings.DATABASES,
    "CHANNEL_LAYERS": settings.CHANNEL_LAYERS,
    "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
    "CACHES": settings.CACHES,
    "TOOLCHAT_TASKS_IN_PROCESS": settings.TOOLCHAT_TASKS_IN_PROCESS,
    "LLM_PROVIDER": settings.LLM_PROVIDER,
    "LLM_MODEL": settings.LLM_MODEL,
    "LLM_MAX_RETRIES": settings.LLM_MAX_RETRIES,
    "TOOLCHAT_OFFLINE_WORD_DELAY_MS": settings.TOOLCHAT_OFFLINE_WORD_DELAY_MS,
    "TOOLCHAT_SYSTEM_PROMPT": settings.TOOLCHAT_SYSTEM_PROMPT,
}, default=str))
"""


def run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    """Run Python in the project folder with only the given variables set."""
    clean = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "DJANGO_SETTINGS_MODULE": "project.settings.base",
        **env,
    }
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def dump_settings(**env: str) -> dict:
    result = run(["-c", DUMP_SETTINGS], **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_start_up_fails_without_a_secret_key_when_debug_is_off(tmp_path):
    result = run(["manage.py", "check"], DJANGO_DEBUG="0", DATABASE_URL=f"sqlite:///{tmp_path}/db")
    assert result.returncode != 0
    assert "ImproperlyConfigured: DJANGO_SECRET_KEY is not set." in result.stderr
    assert "DJANGO_DEBUG=1" in result.stderr  # it says how to get going locally, too


def test_debug_on_runs_without_a_secret_key(tmp_path):
    result = run(["manage.py", "check"], DJANGO_DEBUG="1", DATABASE_URL=f"sqlite:///{tmp_path}/db")
    assert result.returncode == 0, result.stderr


def test_deploy_check_reports_no_issues_under_production_settings():
    result = run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], **PRODUCTION_ENV)
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


def test_sqlite_runs_in_wal_mode(tmp_path):
    code = (
        "import django; django.setup()\n"
        "from django.db import connection\n"
        "with connection.cursor() as cursor:\n"
        "    cursor.execute('PRAGMA journal_mode')\n"
        "    print(cursor.fetchone()[0])\n"
    )
    result = run(["-c", code], DJANGO_DEBUG="1", DATABASE_URL=f"sqlite:///{tmp_path}/wal.sqlite3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "wal"
    # WAL is a property of the file: a plain connection opened later sees it too.
    with contextlib.closing(sqlite3.connect(tmp_path / "wal.sqlite3")) as plain:
        assert plain.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_sqlite_is_the_default_database():
    database = dump_settings(DJANGO_DEBUG="1")["DATABASES"]["default"]
    assert database["ENGINE"] == "django.db.backends.sqlite3"
    assert database["NAME"] == str(ROOT / "db.sqlite3")
    assert "journal_mode=WAL" in database["OPTIONS"]["init_command"]
    # Under ASGI each request has a thread of its own: a kept connection would outlive it.
    assert database["CONN_MAX_AGE"] == 0


def test_postgres_url_uses_psycopg_with_the_connection_pool():
    database = dump_settings(**PRODUCTION_ENV, DATABASE_POOL_MAX_SIZE="20")["DATABASES"]["default"]
    assert database["ENGINE"] == "django.db.backends.postgresql"
    assert (database["HOST"], database["PORT"], database["NAME"]) == (
        "db.example.com",
        5432,
        "toolchat",
    )
    assert database["OPTIONS"]["pool"] == {
        "min_size": 1,
        "max_size": 20,
        "timeout": 10,
        "reconnect_timeout": 5,
    }
    # Django refuses a pool together with persistent connections.
    assert database["CONN_MAX_AGE"] == 0


def test_the_pool_can_be_turned_off():
    database = dump_settings(**PRODUCTION_ENV, DATABASE_POOL="0")["DATABASES"]["default"]
    assert "pool" not in database.get("OPTIONS", {})


def test_the_database_urls_own_options_are_kept_beside_the_pool():
    # A managed PostgreSQL's URL says how to connect (TLS): the pool must not drop it.
    url = PRODUCTION_ENV["DATABASE_URL"] + "?sslmode=require&connect_timeout=5"
    database = dump_settings(**{**PRODUCTION_ENV, "DATABASE_URL": url})["DATABASES"]["default"]
    assert database["OPTIONS"]["sslmode"] == "require"
    assert database["OPTIONS"]["connect_timeout"] == 5
    assert database["OPTIONS"]["pool"]["max_size"] == 20


def test_postgresql_prepares_repeated_statements_unless_turned_off():
    database = dump_settings(**PRODUCTION_ENV)["DATABASES"]["default"]
    assert database["OPTIONS"]["server_side_binding"] is True
    assert database["OPTIONS"]["prepare_threshold"] == 5
    off = dump_settings(**PRODUCTION_ENV, DATABASE_PREPARED_STATEMENTS="0")["DATABASES"]["default"]
    assert "server_side_binding" not in off["OPTIONS"]
    assert "prepare_threshold" not in off["OPTIONS"]


def test_without_redis_channels_are_in_memory_and_tasks_run_in_process():
    dumped = dump_settings(DJANGO_DEBUG="1")
    assert (
        dumped["CHANNEL_LAYERS"]["default"]["BACKEND"]
        == "chat.live.layers.ThreadSafeInMemoryChannelLayer"
    )
    assert dumped["TOOLCHAT_TASKS_IN_PROCESS"] is True
    assert dumped["CELERY_BROKER_URL"] == "memory://"


def test_with_redis_channels_and_celery_use_it():
    dumped = dump_settings(**PRODUCTION_ENV)
    layer = dumped["CHANNEL_LAYERS"]["default"]
    assert layer["BACKEND"] == "chat.live.redis_layer.RedisChannelLayer"
    (host,) = layer["CONFIG"]["hosts"]
    assert host["address"] == PRODUCTION_ENV["REDIS_URL"]
    # Above channels_redis's 5 s blocking pop, which redis-py 8's 5 s default would race.
    assert host["socket_timeout"] > 5
    assert dumped["CELERY_BROKER_URL"] == PRODUCTION_ENV["REDIS_URL"]
    assert dumped["TOOLCHAT_TASKS_IN_PROCESS"] is False
    # One pool of Redis connections per process (project/cache.py), not one per request.
    assert dumped["CACHES"]["default"]["BACKEND"] == "project.cache.RedisCache"


def test_provider_is_offline_without_a_key_and_openai_with_one():
    assert dump_settings(DJANGO_DEBUG="1")["LLM_PROVIDER"] == "offline"
    dumped = dump_settings(DJANGO_DEBUG="1", OPENAI_API_KEY="sk-test")
    assert (dumped["LLM_PROVIDER"], dumped["LLM_MODEL"]) == ("openai", "gpt-4o-mini")
    dumped = dump_settings(DJANGO_DEBUG="1", OPENAI_API_KEY="sk-test", LLM_PROVIDER="offline")
    assert dumped["LLM_PROVIDER"] == "offline"


def test_the_offline_model_streams_20_ms_a_word_unless_told_otherwise():
    assert dump_settings(DJANGO_DEBUG="1")["TOOLCHAT_OFFLINE_WORD_DELAY_MS"] == 20
    dumped = dump_settings(DJANGO_DEBUG="1", TOOLCHAT_OFFLINE_WORD_DELAY_MS="0")
    assert dumped["TOOLCHAT_OFFLINE_WORD_DELAY_MS"] == 0


def test_a_default_system_prompt_is_on_unless_set_to_none():
    assert dump_settings(DJANGO_DEBUG="1")["TOOLCHAT_SYSTEM_PROMPT"].startswith(
        "You are a helpful assistant."
    )
    # Empty is unset, as for every variable (docker-compose passes unset ones as empty).
    assert dump_settings(DJANGO_DEBUG="1", TOOLCHAT_SYSTEM_PROMPT="")[
        "TOOLCHAT_SYSTEM_PROMPT"
    ].startswith("You are a helpful assistant.")
    dumped = dump_settings(DJANGO_DEBUG="1", TOOLCHAT_SYSTEM_PROMPT="  Talk like a pirate.\n")
    assert dumped["TOOLCHAT_SYSTEM_PROMPT"] == "Talk like a pirate."
    assert (
        dump_settings(DJANGO_DEBUG="1", TOOLCHAT_SYSTEM_PROMPT="None")["TOOLCHAT_SYSTEM_PROMPT"]
        == ""
    )


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LLM_PROVIDER", "anthropic"),
        ("LLM_MAX_RETRIES", "three"),
        ("LLM_TIMEOUT_S", "soon"),
        ("DJANGO_DEBUG", "maybe"),
        ("TOOLCHAT_OFFLINE_WORD_DELAY_MS", "fast"),
        ("TOOLCHAT_OFFLINE_WORD_DELAY_MS", "-5"),
    ],
)
def test_a_bad_value_fails_with_a_message_naming_the_variable(variable, value):
    result = run(["-c", DUMP_SETTINGS], **{"DJANGO_DEBUG": "1", variable: value})
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("django.core.exceptions.ImproperlyConfigured: ")
    assert f"{variable}={value!r}" in last_line


def test_a_fresh_make_run_start_prints_no_warnings(tmp_path):
    """What `make run` runs, on a new SQLite file: only the lines a user needs."""
    env = {"DJANGO_DEBUG": "1", "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3"}
    migrate = run(["manage.py", "migrate", "--noinput"], **env)
    assert migrate.returncode == 0, migrate.stderr
    demo = run(["manage.py", "demo_user"], **env)
    assert demo.returncode == 0, demo.stderr
    serve = run(["-W", "default", "-c", "from project.asgi import application"], **env)
    assert serve.returncode == 0, serve.stderr
    for step in (migrate, demo, serve):
        printed = step.stdout + step.stderr
        assert "WARNING" not in printed.upper(), printed
    assert "Created demo user" in demo.stdout
