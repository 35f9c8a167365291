"""Deployment kinds: per-kind configuration checked before anything is saved, credentials
sealed at rest and never displayed, per-kind model ids with shipped defaults and overrides."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from catalog.models import Deployment
from catalog.platform_config import (
    PlatformConfig,
    PlatformConfigError,
    check,
    default_base_url,
    default_model_id,
)
from catalog.services import load_catalog
from catalog.snapshot import build_snapshot
from simulator.platforms import make_service_account

pytestmark = pytest.mark.django_db

AKID = "AKIAEZATTESTKEY00001"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.fixture(scope="module")
def service_account() -> dict[str, str]:
    return make_service_account("http://127.0.0.1:1/token", "ezat-test-project")


def add(*args: str) -> str:
    out = io.StringIO()
    call_command("add_deployment", *args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (PlatformConfig("bedrock"), "region"),
        (PlatformConfig("bedrock", region="mars-1"), "region"),
        (
            PlatformConfig("bedrock", region="us-east-1", aws_access_key_id=AKID),
            "aws_secret_access_key",
        ),
        (
            PlatformConfig(
                "bedrock",
                region="us-east-1",
                aws_access_key_id="akia-lower",
                aws_secret_access_key=SECRET,
            ),
            "aws_access_key_id",
        ),
        (
            PlatformConfig(
                "bedrock", region="us-east-1", aws_access_key_id=AKID, aws_secret_access_key="x y"
            ),
            "aws_secret_access_key",
        ),
        (
            PlatformConfig(
                "bedrock",
                region="us-east-1",
                api_key="k" * 30,
                aws_access_key_id=AKID,
                aws_secret_access_key=SECRET,
            ),
            "bedrock_api_key",
        ),
        (PlatformConfig("bedrock", region="us-east-1", api_key="short"), "bedrock_api_key"),
        (PlatformConfig("vertex", region="us-east5"), "project"),
        (PlatformConfig("vertex", project="ezat-project"), "region"),
        (PlatformConfig("vertex", project="Bad_Project", region="us-east5"), "project"),
        (
            PlatformConfig(
                "vertex", project="ezat-project", region="us-east5", service_account_json="{"
            ),
            "service_account_file",
        ),
        (
            PlatformConfig(
                "vertex",
                project="ezat-project",
                region="us-east5",
                service_account_json='{"type": "authorized_user"}',
            ),
            "service_account_file",
        ),
        (PlatformConfig("anthropic", api_key="k" * 20), "url"),
        (PlatformConfig("anthropic", base_url="http://x"), "api_key"),
        (PlatformConfig("gemini"), "kind"),
        (
            PlatformConfig("bedrock", region="us-east-1", model_ids={"a": "bad id with spaces"}),
            "model_ids",
        ),
    ],
)
def test_bad_configuration_names_the_field(config: PlatformConfig, field: str) -> None:
    with pytest.raises(PlatformConfigError) as raised:
        check(config)
    assert raised.value.field == field


def test_a_malformed_private_key_is_refused(service_account: dict[str, str]) -> None:
    broken = {
        **service_account,
        "private_key": "-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n",
    }
    with pytest.raises(PlatformConfigError, match="private key cannot be loaded"):
        check(
            PlatformConfig(
                "vertex",
                project="ezat-project",
                region="us-east5",
                service_account_json=json.dumps(broken),
            )
        )


def test_shipped_model_ids_and_endpoints() -> None:
    assert (
        default_model_id("bedrock", "anthropic/claude-sonnet-4-6") == "anthropic.claude-sonnet-4-6"
    )
    assert (
        default_model_id("bedrock", "anthropic/claude-haiku-4-5")
        == "anthropic.claude-haiku-4-5-20251001-v1:0"
    )
    assert default_model_id("vertex", "anthropic/claude-haiku-4-5") == "claude-haiku-4-5@20251001"
    assert default_model_id("anthropic", "anthropic/claude-sonnet-4-6") == "claude-sonnet-4-6"
    assert (
        default_base_url("bedrock", "eu-west-1")
        == "https://bedrock-runtime.eu-west-1.amazonaws.com"
    )
    assert default_base_url("vertex", "global") == "https://aiplatform.googleapis.com/v1"
    assert default_base_url("vertex", "us-east5") == "https://us-east5-aiplatform.googleapis.com/v1"


def test_every_bundled_model_has_an_id_on_each_platform() -> None:
    catalog = json.loads(
        (Path(__file__).resolve().parents[2] / "catalog/data/models.json").read_text()
    )
    shipped = json.loads(
        (Path(__file__).resolve().parents[2] / "catalog/data/platform_model_ids.json").read_text()
    )
    ids = {m["id"] for m in catalog["models"]}
    assert set(shipped["bedrock"]) == ids == set(shipped["vertex"])


def test_cli_bedrock_with_access_keys_seals_them(capsys: pytest.CaptureFixture[str]) -> None:
    load_catalog()
    out = add(
        "bedrock-1",
        "--kind",
        "bedrock",
        "--region",
        "us-east-1",
        "--aws-access-key-id",
        AKID,
        "--aws-secret-access-key",
        SECRET,
    )
    assert "created" in out and SECRET not in out
    dep = Deployment.objects.get(name="bedrock-1")
    assert dep.kind == "bedrock" and dep.region == "us-east-1" and dep.base_url == ""
    raw = Deployment.objects.values_list("secrets_encrypted", flat=True).get(pk=dep.pk)
    assert SECRET not in raw and AKID not in raw
    assert dep.get_secrets() == {"aws_access_key_id": AKID, "aws_secret_access_key": SECRET}
    assert SECRET not in dep.secrets_hint and dep.secrets_hint.endswith(AKID[-4:])
    info = build_snapshot().resolve("claude-sonnet-4-6").routes[0]  # type: ignore[union-attr]
    assert info.upstream_model_id == "anthropic.claude-sonnet-4-6"
    assert info.deployment.base_url == "https://bedrock-runtime.us-east-1.amazonaws.com"
    assert SECRET not in repr(info)


def test_cli_bedrock_api_key_and_model_id_overrides() -> None:
    load_catalog()
    add(
        "bedrock-2",
        "--kind",
        "bedrock",
        "--region",
        "us-west-2",
        "--bedrock-api-key",
        "ABSKbedrockapikey0123456789",
        "--model-ids",
        '{"anthropic/claude-sonnet-4-6": "us.anthropic.claude-sonnet-4-6"}',
    )
    dep = Deployment.objects.get(name="bedrock-2")
    assert dep.get_api_key() == "ABSKbedrockapikey0123456789" and dep.get_secrets() == {}
    routes = {
        r.deployment.name: r.upstream_model_id
        for r in build_snapshot().resolve("claude-sonnet-4-6").routes
    }  # type: ignore[union-attr]
    assert routes["bedrock-2"] == "us.anthropic.claude-sonnet-4-6"


def test_cli_vertex_with_a_service_account_file(
    tmp_path: Path, service_account: dict[str, str]
) -> None:
    load_catalog()
    key_file = tmp_path / "sa.json"
    key_file.write_text(json.dumps(service_account))
    add(
        "vertex-1",
        "--kind",
        "vertex",
        "--project",
        "ezat-test-project",
        "--region",
        "us-east5",
        "--service-account-file",
        str(key_file),
    )
    dep = Deployment.objects.get(name="vertex-1")
    assert service_account["private_key"] not in dep.secrets_encrypted
    assert dep.secrets_hint == f"service account {service_account['client_email']}"
    route = build_snapshot().resolve("claude-haiku-4-5").routes[0]  # type: ignore[union-attr]
    assert route.upstream_model_id == "claude-haiku-4-5@20251001"
    assert route.deployment.project == "ezat-test-project"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--kind", "bedrock"), "--region: a bedrock deployment needs its AWS region"),
        (("--kind", "vertex", "--region", "us-east5"), "--project: a vertex deployment needs"),
        (
            (
                "--kind",
                "vertex",
                "--project",
                "ezat-test-project",
                "--region",
                "us-east5",
                "--service-account-file",
                "/nonexistent/sa.json",
            ),
            "--service-account-file: cannot read",
        ),
        (
            (
                "--kind",
                "bedrock",
                "--region",
                "us-east-1",
                "--aws-access-key-id",
                "nope",
                "--aws-secret-access-key",
                SECRET,
            ),
            "--aws-access-key-id: malformed",
        ),
        (
            ("--kind", "bedrock", "--region", "us-east-1", "--api-key", "k" * 20),
            "--api-key is for anthropic",
        ),
    ],
)
def test_cli_refuses_bad_configuration_and_saves_nothing(
    args: tuple[str, ...], message: str
) -> None:
    load_catalog()
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        add("bad", *args)
    assert not Deployment.objects.filter(name="bad").exists()


def test_admin_edits_platform_fields_and_never_shows_secrets(
    service_account: dict[str, str],
) -> None:
    load_catalog()
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(admin)
    form = {
        "name": "vtx",
        "kind": "vertex",
        "base_url": "",
        "region": "us-east5",
        "project": "ezat-test-project",
        "model_ids": "{}",
        "weight": "1",
        "enabled": "on",
        "max_concurrency": "10",
        "fair_share": "0.5",
        "serves_all_models": "on",
        "models-TOTAL_FORMS": "0",
        "models-INITIAL_FORMS": "0",
    }
    bad = client.post("/admin/catalog/deployment/add/", {**form, "project": ""})
    assert bad.status_code == 200 and b"needs its Google Cloud project" in bad.content
    assert not Deployment.objects.filter(name="vtx").exists()
    upload = io.BytesIO(json.dumps(service_account).encode())
    upload.name = "sa.json"
    saved = client.post("/admin/catalog/deployment/add/", {**form, "service_account_file": upload})
    assert saved.status_code == 302, saved.content[:2000]
    dep = Deployment.objects.get(name="vtx")
    assert dep.get_secrets()["service_account_json"]
    page = client.get(f"/admin/catalog/deployment/{dep.pk}/change/")
    assert service_account["private_key"][40:80].encode() not in page.content
    assert service_account["client_email"].encode() in page.content
    # Saving again without a new file keeps the stored key.
    again = client.post(f"/admin/catalog/deployment/{dep.pk}/change/", form)
    assert again.status_code == 302
    dep.refresh_from_db()
    assert dep.get_secrets()["service_account_json"]


@pytest.mark.parametrize(
    ("given", "saved"),
    [
        ("http://127.0.0.1:9", "http://127.0.0.1:9/v1"),
        ("http://127.0.0.1:9/", "http://127.0.0.1:9/v1"),
        ("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1"),
        ("http://127.0.0.1:9/v1/", "http://127.0.0.1:9/v1"),
        ("http://127.0.0.1:9/v1beta1", "http://127.0.0.1:9/v1beta1"),
        ("https://proxy.example.com/vertex", "https://proxy.example.com/vertex/v1"),
    ],
)
def test_a_vertex_url_works_with_and_without_its_v1(
    service_account: dict[str, str], tmp_path: Path, given: str, saved: str
) -> None:
    """Issue 33: `--url http://host` (no /v1) sent requests to /projects/… and got 404s."""
    from catalog.platform_config import base_url_for

    load_catalog()
    key_file = tmp_path / "sa.json"
    key_file.write_text(json.dumps(service_account))
    add(
        "vtx",
        "--kind",
        "vertex",
        "--project",
        "ezat-test-project",
        "--region",
        "us-east5",
        "--url",
        given,
        "--service-account-file",
        str(key_file),
    )
    assert Deployment.objects.get(name="vtx").base_url == saved
    # A row saved before (without the version) is called with it too.
    assert base_url_for("vertex", given.rstrip("/"), "us-east5") == saved
