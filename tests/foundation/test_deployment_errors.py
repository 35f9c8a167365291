"""An operator gets the real reason a deployment fails; a caller gets it in words (issue 33,
items 4 and 5): add_deployment warns when a Bedrock or Vertex deployment would have no
credentials, an attempt that never got an answer says why in the request log (the class and
message) while the caller's error names no Python class, and the admin shows each
deployment's last error."""

from __future__ import annotations

import socket
import ssl
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from accounts.services import create_org
from billing.models import RequestLog
from catalog.models import Deployment
from catalog.services import load_catalog
from gateway.attempt import _connect_error
from gateway.providers import PlatformAuthError
from gateway.selectors import last_attempt_errors

pytestmark = pytest.mark.django_db
NO_CHAIN = "no AWS credentials found in the standard chain"


@pytest.fixture
def no_ambient_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Neither botocore's chain nor Google's ADC finds anything (and neither probes a
    metadata server)."""
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "GOOGLE_APPLICATION_CREDENTIALS",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")


def _add(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("add_deployment", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.usefixtures("no_ambient_credentials")
def test_add_deployment_warns_when_bedrock_has_no_credentials() -> None:
    load_catalog()
    out, err = _add("b1", "--kind", "bedrock", "--region", "us-east-1")
    assert "created" in out and Deployment.objects.filter(name="b1").exists()
    assert NO_CHAIN in err and "b1" in err, err
    _, err = _add(
        "b2",
        "--kind",
        "bedrock",
        "--region",
        "us-east-1",
        "--aws-access-key-id",
        "AKIAABCDEFGHIJKLMNOP",
        "--aws-secret-access-key",
        "a" * 40,
    )
    assert err == ""


@pytest.mark.usefixtures("no_ambient_credentials")
def test_add_deployment_sees_credentials_in_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    load_catalog()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAABCDEFGHIJKLMNOP")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "a" * 40)
    _, err = _add("b1", "--kind", "bedrock", "--region", "us-east-1")
    assert err == ""


@pytest.mark.usefixtures("no_ambient_credentials")
def test_add_deployment_warns_when_vertex_has_no_credentials() -> None:
    load_catalog()
    out, err = _add("v1", "--kind", "vertex", "--project", "ezat-test", "--region", "us-east5")
    assert "created" in out
    assert "no Google Application Default Credentials" in err and "--service-account-file" in err


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (PlatformAuthError(NO_CHAIN), "could not authenticate with the provider"),
        (socket.gaierror(-2, "Name or service not known"), "host name does not resolve"),
        (ConnectionRefusedError(111, "Connection refused"), "refused the connection"),
        (ssl.SSLError("bad handshake"), "TLS"),
        (ConnectionResetError(104, "reset"), "connection to the provider was lost"),
        (OSError("something"), "could not reach the provider"),
    ],
)
def test_the_caller_gets_words_and_the_operator_gets_the_class(
    exc: BaseException, words: str
) -> None:
    error = _connect_error(exc)
    assert words in error.message
    assert type(exc).__name__ not in error.message and "(" + type(exc).__name__ not in error.message
    assert error.reason.startswith(f"{type(exc).__name__}: ")
    assert error.status == 502


def _logged(org_id: int, request_id: str, at: datetime, attempts: list[dict[str, object]]) -> None:
    RequestLog.objects.create(
        request_id=request_id,
        org_id=org_id,
        api="messages",
        status="ok",
        http_status=200,
        started_at=at,
        created_at=at,
        attempts=attempts,
    )


def test_the_admin_shows_each_deployments_last_error() -> None:
    load_catalog()
    org = create_org(name="ops")
    _add("b1", "--url", "http://127.0.0.1:9", "--api-key", "sk-1234567890abcd")
    _add("ok1", "--url", "http://127.0.0.1:10", "--api-key", "sk-1234567890abcd")
    failed = {"deployment": "b1", "outcome": "connect_error", "status": 502}
    _logged(
        org.pk,
        "req_old",
        datetime(2026, 1, 1, tzinfo=UTC),
        [{**failed, "reason": "gaierror: old"}],
    )
    _logged(
        org.pk,
        "req_new",
        datetime(2026, 1, 2, tzinfo=UTC),
        [
            {**failed, "reason": f"PlatformAuthError: {NO_CHAIN}"},
            {"deployment": "ok1", "outcome": "ok", "status": 200},
        ],
    )
    errors = last_attempt_errors(["b1", "ok1"])
    assert set(errors) == {"b1"}
    assert errors["b1"].describe() == f"connect_error: PlatformAuthError: {NO_CHAIN}"

    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(admin)
    listing = client.get("/admin/catalog/deployment/")
    assert listing.status_code == 200
    assert NO_CHAIN.encode() in listing.content and b"Last error" in listing.content
    page = client.get(f"/admin/catalog/deployment/{Deployment.objects.get(name='b1').pk}/change/")
    assert NO_CHAIN.encode() in page.content
