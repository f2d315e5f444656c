"""The production files: docker-compose.yml and the Dockerfile.

No Docker engine runs where the tests run, so these read the files and check
what `docker compose up` would be given: the services, their images,
commands, health checks, start-up order, and every setting the code reads.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
# What production runs: base.py and the modules it imports (not the test settings).
SETTINGS = [ROOT / "project" / "settings" / name for name in ("base.py", "toolchat.py", "env.py")]

# Read by the settings but deliberately not passed by compose: the image
# collects its static files at build time into the default folder.
NOT_PASSED_BY_COMPOSE = {"DJANGO_STATIC_ROOT"}
REQUIRED = {"DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS", "DATABASE_URL"}


def settings_variables() -> set[str]:
    """Every environment variable the production settings read."""
    source = "\n".join(path.read_text() for path in SETTINGS)
    pattern = r"\b(?:env_(?:str|bool|int|float|list)|os\.environ\.get|os\.getenv)\(\s*\"([A-Z][A-Z0-9_]*)\""
    names = set(re.findall(pattern, source))
    assert {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY", "LLM_PROVIDER"} <= names
    return names


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


@pytest.fixture(scope="module")
def dockerfile() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = "\n".join(lines).replace("\\\n", " ")
    return [" ".join(line.split()) for line in joined.splitlines() if line.strip()]


def command_of(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


def healthcheck_text(service: dict[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    return test if isinstance(test, str) else " ".join(str(part) for part in test)


def test_the_stack_has_its_six_services(services):
    assert set(services) == {"postgres", "redis", "migrate", "web", "worker", "beat"}


def test_postgres_and_redis_use_pinned_major_images_with_volumes_and_healthchecks(services):
    postgres, redis = services["postgres"], services["redis"]
    assert postgres["image"] == "postgres:16"
    assert "pg_isready" in healthcheck_text(postgres)
    assert any(v.endswith(":/var/lib/postgresql/data") for v in postgres["volumes"])
    assert postgres["environment"]["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")

    assert redis["image"] == "redis:7"
    assert "redis-cli ping" in healthcheck_text(redis)
    assert any(v.endswith(":/data") for v in redis["volumes"])


@pytest.mark.parametrize("name", ["web", "worker", "migrate", "beat"])
def test_app_services_build_the_image_of_this_repository(services, name):
    service = services[name]
    assert service["build"] == "."
    assert service["image"] == "toolchat:latest"


def test_web_serves_the_asgi_app_with_uvicorn_and_checks_healthz(services):
    web = services["web"]
    command = command_of(web)
    assert command[:2] == ["uvicorn", "project.asgi:application"]
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert command[command.index("--port") + 1] == "8000"
    assert "/healthz/" in healthcheck_text(web)
    assert any(str(port).endswith(":8000") for port in web["ports"])
    # More uvicorn processes per container, read by uvicorn itself.
    assert web["environment"]["WEB_CONCURRENCY"] == "${WEB_CONCURRENCY:-1}"


def test_worker_runs_celery_and_is_checked_with_inspect_ping(services):
    worker = services["worker"]
    assert command_of(worker)[:4] == ["celery", "-A", "project", "worker"]
    assert "celery -A project inspect ping" in healthcheck_text(worker)
    assert "ports" not in worker  # workers are scaled with --scale; nothing to publish


def test_beat_schedules_the_recovery_of_lost_runs(services):
    assert command_of(services["beat"])[:4] == ["celery", "-A", "project", "beat"]
    assert "ports" not in services["beat"]
    assert "ping()" in healthcheck_text(services["beat"])  # it can reach the broker


def test_every_long_running_service_restarts_and_is_health_checked(services):
    """After an outage or a crash, the stack comes back by itself (docs/deploy.md)."""
    for name, service in services.items():
        if name == "migrate":
            continue  # runs once
        assert service["restart"] == "unless-stopped", name
        assert not service["healthcheck"].get("disable"), name
        assert healthcheck_text(service), name


def test_migrations_run_once_before_web_and_worker_start(services):
    assert command_of(services["migrate"]) == ["python", "manage.py", "migrate", "--noinput"]
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("web", "worker", "beat"):
        depends = services[name]["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy"
        assert depends["redis"]["condition"] == "service_healthy"
        assert depends["migrate"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("name", ["web", "worker", "migrate", "beat"])
def test_app_services_get_every_variable_the_settings_read(services, name):
    environment = services[name]["environment"]
    variables = settings_variables()
    missing = variables - NOT_PASSED_BY_COMPOSE - set(environment)
    assert not missing, f"{name} does not pass {sorted(missing)} (settings read them)"
    for variable in (variables & set(environment)) - REQUIRED:
        value = str(environment[variable])
        # Optional settings are passed through empty when unset, and an empty
        # value means "use the default" in settings (env_str and friends).
        if value.startswith("${"):
            assert value == f"${{{variable}:-}}", f"{variable}={value!r}"


def test_production_values_are_fixed_or_required(services):
    environment = services["web"]["environment"]
    assert environment["DJANGO_DEBUG"] == "0"
    assert environment["DJANGO_SETTINGS_MODULE"] == "project.settings.base"
    assert environment["DJANGO_SECRET_KEY"].startswith("${DJANGO_SECRET_KEY:?")
    assert environment["DJANGO_ALLOWED_HOSTS"].startswith("${DJANGO_ALLOWED_HOSTS:?")
    # The container's own health check calls 127.0.0.1, which must be an allowed host.
    assert environment["DJANGO_ALLOWED_HOSTS"].endswith(",localhost,127.0.0.1")
    assert environment["DATABASE_URL"].startswith("postgres://toolchat:${POSTGRES_PASSWORD:?")
    assert environment["DATABASE_URL"].endswith("@postgres:5432/toolchat")
    assert environment["REDIS_URL"] == "redis://redis:6379/0"


def test_required_variables_fail_with_a_message_that_says_what_to_do(compose):
    text = (ROOT / "docker-compose.yml").read_text()
    for variable in ("DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS", "POSTGRES_PASSWORD"):
        assert re.search(rf"\${{{variable}:\?set {variable} ", text), variable
    assert set(compose["volumes"]) == {"postgres-data", "redis-data"}


def test_dockerfile_builds_a_non_root_image_that_serves_the_asgi_app(dockerfile):
    assert re.fullmatch(r"FROM python:3\.1[12]-slim", dockerfile[0])
    assert "RUN pip install ." in dockerfile
    assert any(
        line.startswith("RUN DJANGO_SECRET_KEY=") and "manage.py collectstatic --noinput" in line
        for line in dockerfile
    )
    users = [line for line in dockerfile if line.startswith("USER ")]
    assert users
    assert users[-1] not in {"USER root", "USER 0"}
    healthcheck = next(line for line in dockerfile if line.startswith("HEALTHCHECK "))
    assert "http://127.0.0.1:8000/healthz/" in healthcheck
    assert dockerfile[-1].startswith('CMD ["uvicorn", "project.asgi:application"')
    assert "DJANGO_SETTINGS_MODULE=project.settings.base" in " ".join(dockerfile)


def keep_alive_of(command: list[str]) -> int:
    return int(command[command.index("--timeout-keep-alive") + 1])


def test_the_server_outlasts_its_clients_and_proxies_keep_alive(services, dockerfile):
    # uvicorn closes an idle kept-alive connection after 5 s by default: httpx (the openai
    # SDK's client) keeps one 5 s too, so under load a request sent on a connection in the
    # instant the server closed it failed (APIConnectionError, seen in bench/gateway.py at
    # 16 in flight). A proxy's idle timeout (60 s on AWS's load balancers) is outlasted too,
    # so the client or the proxy always closes first.
    import httpx

    from tests.plugins.servers import KEEP_ALIVE_S

    cmd = dockerfile[-1].removeprefix("CMD ")
    served = [
        command_of(services["web"]),
        [str(part) for part in yaml.safe_load(cmd)],
        shlex.split((ROOT / "Makefile").read_text().split("-m uvicorn", 1)[1].replace("\\\n", " ")),
    ]
    assert {keep_alive_of(command) for command in served} == {KEEP_ALIVE_S}
    assert KEEP_ALIVE_S > 60
    assert httpx.Limits().keepalive_expiry < KEEP_ALIVE_S


def test_dockerignore_keeps_secrets_and_local_state_out_of_the_image():
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", ".env", "db.sqlite3*", "staticfiles"} <= ignored
