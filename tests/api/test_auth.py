"""Authentication: management keys, sessions (with CSRF), and what each may reach."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from accounts import keys, services
from accounts.models import ManagementKey, Organization
from tests.api.conftest import bearer_client

pytestmark = pytest.mark.django_db


def keys_url(org: Organization) -> str:
    return f"/api/v1/orgs/{org.pk}/keys"


def test_valid_management_key_reads_and_writes_its_org(org_a: Organization, as_mk_a: APIClient):
    assert as_mk_a.get(keys_url(org_a)).status_code == 200
    created = as_mk_a.post(keys_url(org_a), {"name": "from-ci"}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["secret"].startswith("ezat_sk_")


def test_management_key_records_last_use(org_a: Organization, mk_a: tuple[ManagementKey, str]):
    key, secret = mk_a
    assert key.last_used_at is None
    bearer_client(secret).get(keys_url(org_a))
    key.refresh_from_db()
    assert key.last_used_at is not None


def test_management_key_lists_only_its_org(
    org_a: Organization, org_b: Organization, as_mk_a: APIClient
):
    body = as_mk_a.get("/api/v1/orgs/").json()
    assert [(o["id"], o["role"]) for o in body["results"]] == [(org_a.pk, "owner")]


def test_management_key_of_another_org_is_404(org_b: Organization, as_mk_a: APIClient):
    for path in ("", "/keys", "/usage", "/requests", "/balance", "/ledger"):
        response = as_mk_a.get(f"/api/v1/orgs/{org_b.pk}{path}")
        assert response.status_code == 404, path
    assert as_mk_a.post(keys_url(org_b), {}, format="json").status_code == 404


def test_revoked_management_key_is_401(org_a: Organization, mk_a: tuple[ManagementKey, str]):
    key, secret = mk_a
    ManagementKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
    response = bearer_client(secret).get(keys_url(org_a))
    assert response.status_code == 401
    assert "revoked" in response.json()["detail"]


def test_inference_key_is_refused_with_401(org_a: Organization, key_a: Any):
    secret = services.create_api_key(org=org_a, name="inference").secret
    response = bearer_client(secret).get(keys_url(org_a))
    assert response.status_code == 401
    assert "inference keys" in response.json()["detail"]


@pytest.mark.parametrize(
    "token",
    [
        "nonsense",
        "ezat_mk_short",
        # Right length and alphabet, wrong prefix.
        keys.generate("ezat_xx_"),
    ],
    # Stable ids: the random key must not name the test (pytest-xdist workers compare ids).
    ids=["nonsense", "short-management-key", "wrong-prefix"],
)
def test_malformed_or_wrong_prefix_is_401(org_a: Organization, token: str):
    assert bearer_client(token).get(keys_url(org_a)).status_code == 401


def test_bad_checksum_is_401(org_a: Organization, mk_a: tuple[ManagementKey, str]):
    _, secret = mk_a
    tampered = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    assert bearer_client(tampered).get(keys_url(org_a)).status_code == 401


def test_well_formed_unknown_key_is_401(org_a: Organization):
    secret = keys.generate(keys.MANAGEMENT_PREFIX)
    assert bearer_client(secret).get(keys_url(org_a)).status_code == 401


def test_unauthenticated_is_401_with_challenge(org_a: Organization):
    response = APIClient().get(keys_url(org_a))
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    # Unauthenticated callers can't tell an existing org from a missing one either.
    assert APIClient().get("/api/v1/orgs/999999/keys").status_code == 401
    assert APIClient().get("/api/v1/orgs/").status_code == 401


def test_basic_auth_is_not_accepted(org_a: Organization, owner_a: Any):
    owner_a.set_password("x-pass-1234")  # the credentials below are right, just not accepted
    owner_a.save()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Basic b3duZXItYTp4LXBhc3MtMTIzNA==")
    assert client.get(keys_url(org_a)).status_code == 401


def test_bearer_with_extra_parts_is_401(org_a: Organization, mk_a: tuple[ManagementKey, str]):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {mk_a[1]} extra")
    assert client.get(keys_url(org_a)).status_code == 401


def test_session_writes_require_csrf(org_a: Organization, owner_a: Any):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(owner_a)
    assert client.get(keys_url(org_a)).status_code == 200  # reads need no token
    refused = client.post(keys_url(org_a), {"name": "x"}, format="json")
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]

    # A CSRF cookie and the same secret in the header, as the dashboard's JS sends them.
    secret = "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6"
    client.cookies["csrftoken"] = secret
    ok = client.post(keys_url(org_a), {"name": "x"}, format="json", HTTP_X_CSRFTOKEN=secret)
    assert ok.status_code == 201, ok.content


def test_management_key_needs_no_csrf(org_a: Organization, mk_a: tuple[ManagementKey, str]):
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {mk_a[1]}")
    assert client.post(keys_url(org_a), {"name": "x"}, format="json").status_code == 201


def test_bearer_wins_over_session(
    org_a: Organization, org_b: Organization, owner_b: Any, mk_a: tuple[ManagementKey, str]
):
    """A management key never widens to the orgs of whoever's browser it is used from."""
    client = APIClient()
    client.force_login(owner_b)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {mk_a[1]}")
    assert client.get(keys_url(org_b)).status_code == 404
    assert client.get(keys_url(org_a)).status_code == 200
