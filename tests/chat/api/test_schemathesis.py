"""Schemathesis against the live schema on a real uvicorn: no 5xx, nothing that breaks the schema.

Each operation of /api/v1/schema/ is its own test, with requests generated
from the schema (bounded in number and time), authenticated as a user who owns
a conversation with a finished run; ids in the path are that conversation's
and that run's, so that the requests reach the code behind the lookups.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.chat.api.conftest import stored_turn
from tests.factories import ConversationFactory, UserFactory

EXAMPLES = 30
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture
def live_api(asgi_server):
    """The live schema, and what the requests need: a token and ids that exist."""
    user = UserFactory()
    token = Token.objects.create(user=user).key

    def fresh_ids() -> dict[str, str]:
        # New rows for each operation, so that one operation's DELETE does not
        # turn the next operation's requests into 404s.
        conversation = ConversationFactory(owner=user, title="fuzzed")
        run = stored_turn(conversation)
        return {"conversation_id": str(conversation.id), "run_id": str(run.id)}

    return {
        "schema": schemathesis.openapi.from_url(f"{asgi_server}/api/v1/schema/?format=json"),
        "base_url": asgi_server,
        "headers": {"Authorization": f"Token {token}"},
        "fresh_ids": fresh_ids,
    }


@pytest.mark.postgres
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_the_api_honours_its_schema(live_api, mode):
    """Every operation, with generated requests: no 5xx, every answer as documented."""
    failures: list[str] = []
    tried = 0
    for result in live_api["schema"].get_all_operations():
        operation = result.ok()
        fixed = {
            name: value
            for name, value in live_api["fresh_ids"]().items()
            if any(p.name == name for p in operation.path_parameters)
        }
        strategy = operation.as_strategy(
            generation_mode=mode,
            # Positive requests use ids that exist; negative ones may mangle them.
            path_parameters=fixed if mode == GenerationMode.POSITIVE else None,
        )

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy)
        def check(case):
            nonlocal tried
            tried += 1
            if isinstance(case.query, dict) and "timeout" in case.query:
                # A waiting post is bounded by its run; keep a generated wait short.
                case.query["timeout"] = 3
            try:
                case.call_and_validate(
                    base_url=live_api["base_url"],
                    headers=live_api["headers"],
                    checks=CHECKS,
                    timeout=30,
                )
            except Exception as error:
                failures.append(f"{case.operation.label}: {error}")
                raise

        try:
            check()
        except Unsatisfiable:
            # No invalid request exists for an operation without inputs (GET /tools/).
            assert mode == GenerationMode.NEGATIVE
        except Exception:
            if not failures:
                raise  # not a failed check: a broken test
    assert tried >= 13
    assert not failures, "\n\n".join(failures)


@pytest.mark.postgres
def test_chained_calls_honour_the_schema(live_api, tmp_path):
    """Stateful: schemathesis chains calls by the links it infers (create, then use the id).

    Run by its own CLI, whose engine keeps what the server answered between
    steps (Hypothesis alone calls a live server's varying answers flaky).
    """
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "run",
        f"{live_api['base_url']}/api/v1/schema/?format=json",
        "--phases=stateful",
        "--header",
        f"Authorization: {live_api['headers']['Authorization']}",
        "--checks",
        ",".join(check.__name__ for check in CHECKS),
        "--max-examples",
        "60",
        "--seed",
        "1",
        "--request-timeout",
        "30",
        "--generation-database",
        "none",
        "--no-color",
    ]
    ran = subprocess.run(  # in tmp_path: the CLI keeps a cache in its working directory
        command, capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path
    )
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output[-6000:]
    covered = re.search(r"API Links:\s+(\d+) covered", output)
    assert covered, output[-3000:]
    assert int(covered.group(1)) >= 1, output[-3000:]  # chained, not only one call at a time
