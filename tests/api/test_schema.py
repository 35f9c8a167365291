"""The OpenAPI schema and the docs page."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

EXPECTED = {
    "/api/v1/orgs/": {"get"},
    "/api/v1/orgs/{org_id}": {"get"},
    "/api/v1/orgs/{org_id}/keys": {"get", "post"},
    "/api/v1/orgs/{org_id}/keys/{key_id}": {"get", "patch", "delete"},
    "/api/v1/orgs/{org_id}/keys/{key_id}/revoke": {"post"},
    "/api/v1/orgs/{org_id}/keys/{key_id}/disable": {"post"},
    "/api/v1/orgs/{org_id}/keys/{key_id}/enable": {"post"},
    "/api/v1/orgs/{org_id}/usage": {"get"},
    "/api/v1/orgs/{org_id}/usage/cache": {"get"},
    "/api/v1/orgs/{org_id}/requests": {"get"},
    "/api/v1/orgs/{org_id}/requests.csv": {"get"},
    "/api/v1/orgs/{org_id}/requests/{request_id}": {"get"},
    "/api/v1/orgs/{org_id}/balance": {"get"},
    "/api/v1/orgs/{org_id}/ledger": {"get"},
    "/api/v1/orgs/{org_id}/management-keys": {"get", "post"},
    "/api/v1/orgs/{org_id}/management-keys/{key_id}": {"get", "delete"},
    "/api/v1/orgs/{org_id}/management-keys/{key_id}/revoke": {"post"},
    "/api/v1/orgs/{org_id}/invitations": {"get", "post"},
    "/api/v1/orgs/{org_id}/invitations/{invitation_id}": {"get", "delete"},
    "/api/v1/orgs/{org_id}/fallbacks": {"get"},
    "/api/v1/orgs/{org_id}/fallbacks/{model}": {"get", "put", "delete"},
    "/api/v1/operator/deployments": {"get", "post"},
    "/api/v1/operator/deployments/{name}": {"get", "patch", "delete"},
}


def _schema(fmt: str) -> dict[str, Any]:
    response = APIClient().get("/api/v1/schema", {"format": fmt})  # public: no credentials
    assert response.status_code == 200
    text = response.content.decode()
    return json.loads(text) if fmt == "json" else yaml.safe_load(text)


def test_schema_is_valid_openapi_listing_every_path():
    schema = _schema("json")
    validate_schema(schema)  # the OpenAPI 3 JSON schema, via jsonschema
    assert schema["openapi"].startswith("3.")
    paths = {path: set(item) - {"parameters"} for path, item in schema["paths"].items()}
    assert paths == EXPECTED
    schemes = schema["components"]["securitySchemes"]
    assert schemes["managementKey"]["scheme"] == "bearer"
    assert "cookieAuth" in schemes


def test_schema_yaml_matches_json():
    assert _schema("yaml") == _schema("json")


def test_schema_describes_money_and_params():
    schema = _schema("json")
    usage_params = {
        p["name"] for p in schema["paths"]["/api/v1/orgs/{org_id}/usage"]["get"]["parameters"]
    }
    assert {"group_by", "since", "until", "org_id"} <= usage_params
    log_params = {
        p["name"] for p in schema["paths"]["/api/v1/orgs/{org_id}/requests"]["get"]["parameters"]
    }
    assert {"key", "model", "status", "request_id", "since", "until", "page", "page_size"} <= (
        log_params
    )
    assert "http_status" in log_params
    status = next(
        p
        for p in schema["paths"]["/api/v1/orgs/{org_id}/requests"]["get"]["parameters"]
        if p["name"] == "status"
    )
    assert "error" in str(status["schema"]) or "error" in str(schema["components"])
    balance = schema["components"]["schemas"]["Balance"]["properties"]
    assert balance["balance_usd"]["type"] == "string"
    assert balance["balance_usd"]["format"] == "decimal"
    created = schema["components"]["schemas"]["ApiKeyCreated"]["properties"]
    assert "secret" in created


def test_schema_documents_the_operator_deployments():
    schema = _schema("json")
    components = schema["components"]["schemas"]
    for path in ("/api/v1/operator/deployments", "/api/v1/operator/deployments/{name}"):
        for operation in schema["paths"][path].values():
            if isinstance(operation, dict) and "security" in operation:
                # An operator signs in: a management key acts within one organization only.
                assert operation["security"] == [{"cookieAuth": []}]
    write = components["DeploymentWriteRequest"]["properties"]
    assert {"name", "kind", "base_url", "api_key", "models", "model_ids", "options"} <= set(write)
    assert write["api_key"]["writeOnly"] is True
    shown = components["Deployment"]["properties"]
    assert "api_key" not in shown and {"api_key_set", "api_key_hint"} <= set(shown)
    assert components["DeploymentKindEnum"]["enum"] == [
        "anthropic",
        "bedrock",
        "vertex",
        "openai",
        "azure-openai",
    ]


def test_docs_page_needs_no_cdn():
    response = APIClient().get("/api/v1/docs")
    assert response.status_code == 200
    html = response.content.decode()
    assert "/api/v1/orgs/{org_id}/keys" in html
    # Self-contained: no scripts and no external URLs (Swagger UI / ReDoc would load a CDN).
    assert "<script" not in html and "http://" not in html and "https://" not in html


@pytest.mark.parametrize(
    "path",
    [
        "orgs/",
        "orgs/{org}",
        "orgs/{org}/keys",
        "orgs/{org}/keys/{key}",
        "orgs/{org}/keys/{key}/revoke",
        "orgs/{org}/keys/{key}/disable",
        "orgs/{org}/keys/{key}/enable",
        "orgs/{org}/usage",
        "orgs/{org}/requests",
        "orgs/{org}/balance",
        "orgs/{org}/ledger",
        "orgs/{org}/management-keys",
        "orgs/{org}/management-keys/{mk}",
        "orgs/{org}/management-keys/{mk}/revoke",
    ],
)
def test_options_never_fails(
    path: str, org_a: Any, key_a: Any, mk_a: Any, as_owner_a: APIClient, as_owner_b: APIClient
):
    url = "/api/v1/" + path.format(org=org_a.pk, key=key_a.pk, mk=mk_a[0].pk)
    assert as_owner_a.options(url).status_code == 200
    assert as_owner_b.options(url).status_code == (200 if path == "orgs/" else 404)
