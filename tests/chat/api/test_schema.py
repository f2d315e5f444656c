"""The OpenAPI schema and the Swagger UI: valid, complete, and served without a network."""

from __future__ import annotations

import re

import pytest
import yaml
from django.contrib.staticfiles import finders
from django.core.management import call_command
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

METHODS = ("get", "post", "patch", "delete")


@pytest.fixture(scope="module")
def schema(django_db_blocker) -> dict:
    with django_db_blocker.unblock():
        response = APIClient().get("/api/v1/schema/?format=json")
    assert response.status_code == 200
    return response.json()


def operations(schema: dict):
    for path, item in schema["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, method, item[method]


def test_the_schema_is_public_yaml_by_default():
    response = APIClient().get("/api/v1/schema/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/vnd.oai.openapi")
    assert yaml.safe_load(response.content)["info"]["title"] == "toolchat API"


def test_the_schema_validates_without_a_warning(tmp_path):
    # --fail-on-warn turns every drf-spectacular warning (an unguessable type, a
    # component name clash) into a failure; --validate checks it against OpenAPI 3.
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "s.yaml"))


def test_every_operation_of_design_section_7_and_ours_is_described(schema):
    described = {(path, method) for path, method, _ in operations(schema)}
    assert described == {
        ("/api/v1/conversations/", "get"),
        ("/api/v1/conversations/", "post"),
        ("/api/v1/conversations/{conversation_id}/", "get"),
        ("/api/v1/conversations/{conversation_id}/", "patch"),
        ("/api/v1/conversations/{conversation_id}/", "delete"),
        ("/api/v1/conversations/{conversation_id}/messages/", "get"),
        ("/api/v1/conversations/{conversation_id}/messages/", "post"),
        ("/api/v1/conversations/{conversation_id}/export/", "get"),
        ("/api/v1/runs/{run_id}/", "get"),
        ("/api/v1/runs/{run_id}/events/", "get"),
        ("/api/v1/runs/{run_id}/cancel/", "post"),
        ("/api/v1/runs/{run_id}/replay/", "post"),
        ("/api/v1/runs/{run_id}/replays/", "get"),
        ("/api/v1/runs/{run_id}/compare/", "get"),
        ("/api/v1/models/", "get"),
        ("/api/v1/tools/", "get"),
        ("/api/v1/tool-executions/", "get"),
        ("/api/v1/tool-executions/{execution_id}/approve/", "post"),
        ("/api/v1/tool-executions/{execution_id}/reject/", "post"),
        # Governance (DESIGN.md section 4; docs/governance.md).
        ("/api/v1/approvals/", "get"),
        ("/api/v1/conversations/{conversation_id}/standing-approvals/", "get"),
        ("/api/v1/conversations/{conversation_id}/standing-approvals/{approval_id}/", "delete"),
        ("/api/v1/tool-policies/", "get"),
        ("/api/v1/tool-policies/", "post"),
        ("/api/v1/tool-policies/{policy_id}/", "get"),
        ("/api/v1/tool-policies/{policy_id}/", "patch"),
        ("/api/v1/tool-policies/{policy_id}/", "delete"),
        ("/api/v1/budget-limits/", "get"),
        ("/api/v1/budget-limits/", "post"),
        ("/api/v1/budget-limits/{limit_id}/", "get"),
        ("/api/v1/budget-limits/{limit_id}/", "patch"),
        ("/api/v1/budget-limits/{limit_id}/", "delete"),
        ("/api/v1/usage/", "get"),
        # Beyond section 7: answer the last question again (docs/api.md).
        ("/api/v1/conversations/{conversation_id}/regenerate/", "post"),
        # ...and read the record a resource card links to.
        ("/api/v1/resources/{resource_id}/", "get"),
        # The OpenAI-compatible surface (docs/openai-api.md).
        ("/v1/models", "get"),
        ("/v1/models/{model_id}", "get"),
        ("/v1/chat/completions", "post"),
        ("/v1/responses", "post"),
        ("/v1/responses/{response_id}", "get"),
        ("/v1/responses/{response_id}", "delete"),
        ("/v1/responses/{response_id}/cancel", "post"),
        ("/v1/responses/{response_id}/input_items", "get"),
        ("/v1/conversations", "post"),
        ("/v1/conversations/{conversation_id}", "get"),
        ("/v1/conversations/{conversation_id}", "post"),
        ("/v1/conversations/{conversation_id}", "delete"),
        ("/v1/conversations/{conversation_id}/items", "get"),
        ("/v1/conversations/{conversation_id}/items", "post"),
        ("/v1/conversations/{conversation_id}/items/{item_id}", "get"),
    }


def test_every_operation_has_a_summary_schemas_examples_and_its_errors(schema):
    for path, method, operation in operations(schema):
        label = f"{method.upper()} {path}"
        assert operation.get("summary"), label
        openai = path.startswith("/v1/")  # Bearer tokens only: no session, so no CSRF
        security = (
            [{"bearerAuth": []}, {"tokenAuth": []}]
            if openai
            else [
                {"tokenAuth": []},
                {"cookieAuth": []},
            ]
        )
        assert operation["security"] == security, label
        responses = operation["responses"]
        assert "401" in responses, label
        if "{" in path:
            assert "404" in responses, label
        if method in ("post", "patch", "delete") and not openai:
            assert "403" in responses, f"{label}: CSRF failure of a session"
        success = [code for code in responses if code.startswith("2")]
        assert success, label
        for code, response in responses.items():
            for media_type, content in response.get("content", {}).items():
                assert "schema" in content, f"{label} {code} {media_type}"
                if media_type == "application/json":
                    assert content.get("examples"), f"{label} {code}: no example"
        body = operation.get("requestBody")
        if body:
            content = body["content"]["application/json"]
            assert content.get("examples"), f"{label}: no request example"


def test_strict_inputs_say_they_refuse_unknown_fields(schema):
    components = schema["components"]["schemas"]
    for name in ("ConversationCreateRequest", "MessageCreateRequest"):
        assert components[name]["additionalProperties"] is False
    assert components["MessageCreateRequest"]["required"] == ["content"]


def test_the_message_schema_is_the_openai_shape_plus_ours(schema):
    message = schema["components"]["schemas"]["Message"]["properties"]
    assert {"role", "content", "tool_calls", "tool_call_id"} <= set(message)
    assert {"id", "created_at", "latency_ms", "resource_id", "usage", "tool_execution_id"} <= set(
        message
    )


def test_the_docs_page_uses_the_bundled_swagger_ui(user):
    response = APIClient().get("/api/v1/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assets = re.findall(r'"(/static/drf_spectacular_sidecar/[^"]+)"', html)
    assert any(a.endswith("swagger-ui-bundle.js") for a in assets), html
    assert "cdn" not in html.lower()
    for asset in assets:
        assert finders.find(asset.removeprefix("/static/")), f"{asset} is not a static file"
    assert "/api/v1/schema/" in html
