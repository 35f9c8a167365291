"""The operator API's deployments (issue 30, contract item 2: "the management API can do all of
this too"): CRUD for staff with the catalog permissions, 401/403 for everyone else, a 400 naming
the field for what add_deployment refuses, provider keys never echoed nor logged, an audit line
per change, and the catalog version moved so routing follows."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from accounts import services
from accounts.models import Organization
from catalog.models import CatalogVersion, Deployment, Model
from catalog.services import copy_model, load_catalog, upsert_deployment
from catalog.snapshot import build_snapshot
from tests.api.conftest import bearer_client, session_client

pytestmark = pytest.mark.django_db

URL = "/api/v1/operator/deployments"
HAIKU = "anthropic/claude-haiku-4-5"
SONNET = "anthropic/claude-sonnet-4-6"
GPT = "test/gpt-op"
KEY = "sk-provider-secret-0123456789-WXYZ"
OTHER_KEY = "sk-provider-rotated-9876543210-QRST"


@pytest.fixture(autouse=True)
def catalog(db: Any) -> None:
    load_catalog()
    copy_model(Model.objects.get(id=SONNET), GPT, thinking=Model.Thinking.EFFORT)


@pytest.fixture
def root() -> Any:
    return get_user_model().objects.create_superuser("root", "root@example.com", None)


@pytest.fixture
def as_root(root: Any) -> APIClient:
    return session_client(root)


def staff_with(*codenames: str) -> APIClient:
    user = get_user_model().objects.create_user(
        username="staff-" + "-".join(codenames or ("none",)), password=None, is_staff=True
    )
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return session_client(user)


def openai_body(**changes: Any) -> dict[str, Any]:
    return {
        "name": "vllm-1",
        "kind": "openai",
        "base_url": "http://127.0.0.1:8000/v1",
        "api_key": KEY,
        "models": [GPT],
        "model_ids": {GPT: "Qwen/Qwen3-8B"},
        "options": {"max_tokens_param": "max_tokens"},
        **changes,
    }


def test_create_read_update_disable_delete(as_root: APIClient) -> None:
    created = as_root.post(URL, openai_body(weight=3), format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert body | {"id": 0, "created_at": "", "updated_at": ""} == {
        "id": 0,
        "name": "vllm-1",
        "kind": "openai",
        "base_url": "http://127.0.0.1:8000/v1",
        "region": "",
        "project": "",
        "models": [GPT],
        "serves_all_models": False,
        "model_ids": {GPT: "Qwen/Qwen3-8B"},
        "options": {"max_tokens_param": "max_tokens"},
        "weight": 3,
        "max_concurrency": 100,
        "fair_share": 0.5,
        "enabled": True,
        "api_key_set": True,
        "api_key_hint": "…WXYZ",
        "credentials_hint": "",
        "created_at": "",
        "updated_at": "",
    }
    deployment = Deployment.objects.get(name="vllm-1")
    assert deployment.get_api_key() == KEY and KEY not in deployment.api_key_encrypted

    listed = as_root.get(URL).json()
    assert [d["name"] for d in listed["results"]] == ["vllm-1"] and listed["count"] == 1
    assert as_root.get(f"{URL}/vllm-1").json() == body

    patched = as_root.patch(
        f"{URL}/vllm-1", {"models": [GPT, HAIKU], "max_concurrency": 7}, format="json"
    )
    assert patched.status_code == 200, patched.content
    assert patched.json()["models"] == sorted([GPT, HAIKU])
    assert patched.json()["max_concurrency"] == 7 and patched.json()["weight"] == 3
    assert patched.json()["model_ids"] == {GPT: "Qwen/Qwen3-8B"}  # absent: kept
    assert Deployment.objects.get(name="vllm-1").get_api_key() == KEY  # no credential: kept

    # Off even when the saved row no longer passes the checks (a URL written by hand).
    Deployment.objects.filter(name="vllm-1").update(base_url="ftp://written-by-hand")
    off = as_root.patch(f"{URL}/vllm-1", {"enabled": False}, format="json")
    assert off.status_code == 200 and off.json()["enabled"] is False
    assert "base_url" in _refusal(as_root, "patch", f"{URL}/vllm-1", {"weight": 1})
    Deployment.objects.filter(name="vllm-1").update(base_url="http://127.0.0.1:8000/v1")
    assert "vllm-1" not in {r.deployment.name for r in build_snapshot().by_name[GPT].routes}

    assert as_root.delete(f"{URL}/vllm-1").status_code == 204
    assert not Deployment.objects.filter(name="vllm-1").exists()
    assert as_root.get(f"{URL}/vllm-1").status_code == 404
    assert as_root.delete(f"{URL}/vllm-1").status_code == 404


def test_a_created_deployment_is_routed_by_the_next_snapshot(as_root: APIClient) -> None:
    before = CatalogVersion.objects.get(pk=1).version
    assert not build_snapshot().by_name[GPT].routes  # an effort model: no serve-all route
    assert as_root.post(URL, openai_body(), format="json").status_code == 201
    assert CatalogVersion.objects.get(pk=1).version > before  # what every process polls
    [route] = build_snapshot().by_name[GPT].routes
    assert (route.deployment.name, route.upstream_model_id) == ("vllm-1", "Qwen/Qwen3-8B")
    assert route.deployment.api_key == KEY
    assert route.deployment.options == {"max_tokens_param": "max_tokens"}


def test_the_responses_api_option_is_a_boolean(as_root: APIClient) -> None:
    body = openai_body(options={"responses_api": True, "prompt_cache_key": "client"})
    created = as_root.post(URL, body, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["options"] == {"responses_api": True, "prompt_cache_key": "client"}
    [route] = build_snapshot().by_name[GPT].routes
    assert route.deployment.options["responses_api"] is True


def test_claude_platform_fields(as_root: APIClient) -> None:
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    bedrock = as_root.post(
        URL,
        {
            "name": "br",
            "kind": "bedrock",
            "region": "us-east-1",
            "aws_access_key_id": "AKIAIOSFODNN7EXAMPLE",
            "aws_secret_access_key": secret,
            "model_ids": {HAIKU: "us.anthropic.claude-haiku-4-5"},
        },
        format="json",
    )
    assert bedrock.status_code == 201, bedrock.content
    shown = bedrock.json()
    assert shown["credentials_hint"] == "AWS key …MPLE" and shown["api_key_set"] is False
    assert shown["serves_all_models"] is True and shown["models"] == []
    assert secret not in bedrock.content.decode()
    assert Deployment.objects.get(name="br").get_secrets()["aws_secret_access_key"] == secret
    vertex = as_root.post(
        URL,
        {"name": "vx", "kind": "vertex", "region": "us-east5", "project": "ezat-test-project"},
        format="json",
    )
    assert vertex.status_code == 201, vertex.content
    assert vertex.json()["base_url"] == ""  # the region's endpoint


def _refusal(client: APIClient, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = getattr(client, method)(path, body, format="json")
    assert response.status_code == 400, response.content
    return response.json()


@pytest.mark.parametrize(
    ("changes", "field", "says"),
    [
        ({"models": []}, "models", "must list the models it serves"),
        ({"models": ["nope/nope"]}, "models", "unknown model id(s): nope/nope"),
        ({"models": [GPT, GPT]}, "models", "more than once"),
        ({"model_ids": {"nope/x": "x"}}, "model_ids", "unknown model id(s): nope/x"),
        ({"base_url": "ftp://example.com/v1"}, "base_url", "http:// or https://"),
        ({"base_url": "http://exa mple.com/v1"}, "base_url", "not a valid host name"),
        ({"base_url": ""}, "base_url", "needs its base URL"),
        ({"kind": "gemini"}, "kind", "not a valid choice"),
        ({"region": "us-east-1"}, "region", "does not apply"),
        ({"options": {"nope": "x"}}, "options", "unknown option 'nope'"),
        ({"options": {"max_tokens_param": "n"}}, "options", "max_tokens_param: must be one of"),
        ({"options": {"responses_api": "true"}}, "options", "responses_api: must be one of"),
        ({"options": {"responses_api": 1}}, "options", "responses_api: must be one of"),
        ({"weight": 0}, "weight", "greater than or equal to 1"),
        ({"fair_share": 2}, "fair_share", "less than or equal to 1"),
        ({"api_key": "  "}, "api_key", "may not be blank"),
        ({"spend_cap": 1}, "spend_cap", "unknown field"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    as_root: APIClient, changes: dict[str, Any], field: str, says: str
) -> None:
    errors = _refusal(as_root, "post", URL, openai_body(**changes))
    assert list(errors) == [field] and says in errors[field][0], errors
    assert not Deployment.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "a", "base_url": "https://api.anthropic.com"}, "api_key"),  # anthropic: needs one
        ({"name": "z", "kind": "azure-openai", "base_url": "https://r.openai.azure.com"}, "api_key"),
        ({"name": "b", "kind": "bedrock"}, "region"),
        ({"name": "v", "kind": "vertex", "region": "us-east5"}, "project"),
        ({"name": "v", "kind": "vertex", "project": "ezat-test-project", "region": "us-east5",
          "api_key": "k" * 20}, "api_key"),
        ({"name": "v", "kind": "vertex", "project": "ezat-test-project", "region": "us-east5",
          "service_account_json": {"type": "user"}}, "service_account_json"),
        ({"kind": "openai"}, "name"),
    ],
)  # fmt: skip
def test_each_kind_names_what_it_lacks(
    as_root: APIClient, body: dict[str, Any], field: str
) -> None:
    assert field in _refusal(as_root, "post", URL, body)
    assert not Deployment.objects.exists()


def test_a_taken_name_is_refused(as_root: APIClient) -> None:
    assert as_root.post(URL, openai_body(), format="json").status_code == 201
    errors = _refusal(as_root, "post", URL, openai_body())
    assert errors == {"name": ["a deployment named 'vllm-1' already exists"]}
    upsert_deployment(name="other", base_url="http://127.0.0.1:9", api_key=KEY)
    assert "name" in _refusal(as_root, "patch", f"{URL}/vllm-1", {"name": "other"})


def test_patch_checks_the_whole_result(as_root: APIClient) -> None:
    as_root.post(URL, openai_body(), format="json")
    # Another kind: its own rules, and no credentials carried over from the old kind.
    assert "options" in _refusal(as_root, "patch", f"{URL}/vllm-1", {"kind": "anthropic"})
    to_claude = {"kind": "anthropic", "options": {}, "models": []}
    assert "api_key" in _refusal(as_root, "patch", f"{URL}/vllm-1", to_claude)
    assert "base_url" in _refusal(as_root, "patch", f"{URL}/vllm-1", {"base_url": "nope"})
    saved = Deployment.objects.get(name="vllm-1")
    assert (saved.kind, saved.base_url, saved.get_api_key()) == (
        "openai",
        "http://127.0.0.1:8000/v1",
        KEY,
    )


def test_credentials_are_replaced_as_a_set_and_null_removes_the_key(as_root: APIClient) -> None:
    as_root.post(URL, openai_body(), format="json")
    rotated = as_root.patch(f"{URL}/vllm-1", {"api_key": OTHER_KEY}, format="json")
    assert rotated.json()["api_key_hint"] == "…QRST"
    assert Deployment.objects.get(name="vllm-1").get_api_key() == OTHER_KEY
    keyless = as_root.patch(f"{URL}/vllm-1", {"api_key": None}, format="json")
    assert keyless.status_code == 200, keyless.content
    assert keyless.json()["api_key_set"] is False and keyless.json()["api_key_hint"] == ""
    # An anthropic deployment cannot be left without its key.
    upsert_deployment(name="claude", base_url="http://127.0.0.1:9", api_key=KEY)
    assert "api_key" in _refusal(as_root, "patch", f"{URL}/claude", {"api_key": None})
    assert Deployment.objects.get(name="claude").get_api_key() == KEY


def test_the_provider_key_is_never_echoed_nor_logged(
    as_root: APIClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    answers = [
        as_root.post(URL, openai_body(), format="json"),
        as_root.get(URL),
        as_root.get(f"{URL}/vllm-1"),
        as_root.patch(f"{URL}/vllm-1", {"api_key": OTHER_KEY, "weight": 2}, format="json"),
        as_root.options(URL),
        as_root.post(URL, openai_body(name="bad", base_url="ftp://x"), format="json"),
    ]
    assert [a.status_code for a in answers] == [201, 200, 200, 200, 200, 400]
    for answer in answers:
        text = answer.content.decode()
        assert KEY not in text and OTHER_KEY not in text and "api_key_encrypted" not in text
    logged = "\n".join(
        f"{r.getMessage()} {json.dumps(vars(r), default=str)}" for r in caplog.records
    )
    assert KEY not in logged and OTHER_KEY not in logged
    assert KEY[-4:] not in logged  # not even the hint goes to the audit trail


def test_every_change_is_audited_with_the_actor(
    as_root: APIClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ezat.audit")
    as_root.post(URL, openai_body(), format="json")
    as_root.patch(f"{URL}/vllm-1", {"weight": 5, "api_key": OTHER_KEY}, format="json")
    as_root.patch(f"{URL}/vllm-1", {"enabled": False}, format="json")
    as_root.delete(f"{URL}/vllm-1")
    lines = [r for r in caplog.records if r.name == "ezat.audit"]
    seen = [
        (r.audit, r.actor, getattr(r, "changed", None), getattr(r, "credentials", None))  # type: ignore[attr-defined]
        for r in lines
    ]
    assert seen[0][:2] == ("deployment.create", "web:root") and seen[0][3] == "replaced"
    assert seen[1:] == [
        ("deployment.update", "web:root", ["credentials", "weight"], "replaced"),
        ("deployment.disable", "web:root", None, None),
        ("deployment.delete", "web:root", None, None),
    ]


def test_customers_and_their_keys_are_refused(
    org_a: Organization, owner_a: Any, mk_a: tuple[Any, str]
) -> None:
    upsert_deployment(name="d", base_url="http://127.0.0.1:9", api_key=KEY)
    inference = services.create_api_key(org=org_a, name="app").secret
    for client, status in [
        (APIClient(), 401),  # anonymous
        (bearer_client(inference), 401),  # a customer's inference key
        (bearer_client(mk_a[1]), 403),  # a management key: one org's owner, not an operator
        (session_client(owner_a), 403),  # an org owner who is not staff
        (staff_with(), 403),  # staff without the catalog permissions
    ]:
        for method, path in [("get", URL), ("get", f"{URL}/d"), ("delete", f"{URL}/d")]:
            answer = getattr(client, method)(path)
            assert answer.status_code == status, (method, path, answer.content)
            assert KEY not in answer.content.decode()
        created = client.post(URL, openai_body(), format="json")
        assert created.status_code == status
    assert list(Deployment.objects.values_list("name", flat=True)) == ["d"]
    refused = bearer_client(mk_a[1]).get(URL).json()
    assert "management keys act within one organization" in refused["detail"]


def test_each_method_needs_its_model_permission() -> None:
    upsert_deployment(name="d", base_url="http://127.0.0.1:9", api_key=KEY)
    viewer = staff_with("view_deployment")
    assert viewer.get(URL).status_code == 200
    refused = viewer.patch(f"{URL}/d", {"weight": 2}, format="json")
    assert refused.status_code == 403
    assert refused.json()["detail"] == "this needs the catalog.change_deployment permission"
    assert viewer.post(URL, openai_body(), format="json").status_code == 403
    editor = staff_with("view_deployment", "change_deployment")
    assert editor.patch(f"{URL}/d", {"weight": 2}, format="json").status_code == 200
    assert editor.delete(f"{URL}/d").status_code == 403
    assert staff_with("add_deployment").post(URL, openai_body(), format="json").status_code == 201
    assert staff_with("delete_deployment").delete(f"{URL}/d").status_code == 204


def test_a_session_write_needs_the_csrf_token(root: Any) -> None:
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(root)
    refused = client.post(URL, openai_body(), format="json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    assert not Deployment.objects.exists()


def test_the_admin_console_writes_the_same_audit_lines(
    root: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ezat.audit")
    console = Client()
    console.force_login(root)
    form = {
        "name": "console",
        "kind": "anthropic",
        "base_url": "https://api.example.test",
        "new_api_key": KEY,
        "weight": "1",
        "enabled": "on",
        "max_concurrency": "10",
        "fair_share": "0.5",
        "serves_all_models": "on",
        "models-TOTAL_FORMS": "0",
        "models-INITIAL_FORMS": "0",
    }
    assert console.post(reverse("admin:catalog_deployment_add"), form).status_code == 302
    deployment = Deployment.objects.get(name="console")
    change = reverse("admin:catalog_deployment_change", args=[deployment.pk])
    edited = {**form, "new_api_key": "", "weight": "4"}
    assert console.post(change, edited).status_code == 302
    delete = reverse("admin:catalog_deployment_delete", args=[deployment.pk])
    assert console.post(delete, {"post": "yes"}).status_code == 302
    lines = [r for r in caplog.records if r.name == "ezat.audit"]
    assert [(r.audit, r.actor) for r in lines] == [  # type: ignore[attr-defined]
        ("deployment.create", "admin:root"),
        ("deployment.update", "admin:root"),
        ("deployment.delete", "admin:root"),
    ]
    assert lines[1].changed == ["weight"] and lines[1].credentials == "kept"  # type: ignore[attr-defined]
    logged = json.dumps([vars(r) for r in lines], default=str)
    assert KEY not in logged and KEY[-4:] not in logged
