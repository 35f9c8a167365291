"""Management keys: only signed-in owners create, list and revoke them."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts import keys, services
from accounts.models import ManagementKey, Organization
from tests.api.conftest import bearer_client

pytestmark = pytest.mark.django_db


def mk_url(org: Organization, key: ManagementKey | int | None = None, action: str = "") -> str:
    base = f"/api/v1/orgs/{org.pk}/management-keys"
    if key is not None:
        base += f"/{key if isinstance(key, int) else key.pk}"
    return base + (f"/{action}" if action else "")


def test_owner_creates_a_working_management_key(
    org_a: Organization, owner_a: Any, as_owner_a: APIClient
):
    response = as_owner_a.post(mk_url(org_a), {"name": "terraform"}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    secret = body["secret"]
    assert keys.is_well_formed(secret, keys.MANAGEMENT_PREFIX)
    assert body["prefix"] == secret[: len(body["prefix"])]
    assert body["created_by"] == owner_a.username and body["status"] == "active"

    # The new key works, as an owner of org A.
    new_key_client = bearer_client(secret)
    assert (
        new_key_client.post(f"/api/v1/orgs/{org_a.pk}/keys", {}, format="json").status_code == 201
    )

    listed = as_owner_a.get(mk_url(org_a)).json()
    assert [k["id"] for k in listed["results"]] == [body["id"]]
    assert "secret" not in listed["results"][0]
    assert "secret" not in as_owner_a.get(mk_url(org_a, body["id"])).json()


def test_revoke_stops_the_key(org_a: Organization, as_owner_a: APIClient):
    key, secret = services.create_management_key(org=org_a)
    assert bearer_client(secret).get("/api/v1/orgs/").status_code == 200

    response = as_owner_a.post(mk_url(org_a, key, "revoke"))
    assert response.status_code == 200 and response.json()["status"] == "revoked"
    assert bearer_client(secret).get("/api/v1/orgs/").status_code == 401
    # Idempotent, and DELETE does the same.
    assert as_owner_a.delete(mk_url(org_a, key)).status_code == 204
    first = response.json()["revoked_at"]
    assert as_owner_a.get(mk_url(org_a, key)).json()["revoked_at"] == first


def test_management_keys_cannot_manage_management_keys(
    org_a: Organization, mk_a: tuple[ManagementKey, str], as_mk_a: APIClient
):
    key, _ = mk_a
    listing = as_mk_a.get(mk_url(org_a))
    assert listing.status_code == 403
    assert "sign in as an owner" in listing.json()["detail"]
    assert as_mk_a.post(mk_url(org_a), {"name": "successor"}, format="json").status_code == 403
    assert as_mk_a.delete(mk_url(org_a, key)).status_code == 403
    assert as_mk_a.post(mk_url(org_a, key, "revoke")).status_code == 403
    assert ManagementKey.objects.filter(org=org_a).count() == 1


def test_members_cannot_see_or_make_management_keys(
    org_a: Organization, mk_a: tuple[ManagementKey, str], as_member_a: APIClient
):
    key, _ = mk_a
    assert as_member_a.get(mk_url(org_a)).status_code == 403
    assert as_member_a.get(mk_url(org_a, key)).status_code == 403
    assert as_member_a.post(mk_url(org_a), {}, format="json").status_code == 403
    assert as_member_a.post(mk_url(org_a, key, "revoke")).status_code == 403
    key.refresh_from_db()
    assert key.revoked_at is None


def test_other_orgs_management_keys_are_404(
    org_a: Organization,
    org_b: Organization,
    mk_a: tuple[ManagementKey, str],
    as_owner_a: APIClient,
    as_owner_b: APIClient,
):
    key, secret = mk_a
    assert as_owner_b.get(mk_url(org_a)).status_code == 404
    assert as_owner_b.post(mk_url(org_a), {}, format="json").status_code == 404
    assert as_owner_b.post(mk_url(org_b, key, "revoke")).status_code == 404
    assert as_owner_b.delete(mk_url(org_b, key)).status_code == 404
    assert as_owner_b.get(mk_url(org_b)).json()["results"] == []
    key.refresh_from_db()
    assert key.revoked_at is None
    assert bearer_client(secret).get(f"/api/v1/orgs/{org_a.pk}/keys").status_code == 200


def test_create_rejects_bad_input(org_a: Organization, as_owner_a: APIClient):
    too_long = as_owner_a.post(mk_url(org_a), {"name": "n" * 101}, format="json")
    assert too_long.status_code == 400 and list(too_long.json()) == ["name"]
    unknown = as_owner_a.post(mk_url(org_a), {"org": 2}, format="json")
    assert unknown.json() == {"org": ["unknown field"]}
    assert not ManagementKey.objects.filter(org=org_a).exists()


def test_unknown_management_key_is_404(org_a: Organization, as_owner_a: APIClient):
    assert as_owner_a.get(mk_url(org_a, 31337)).status_code == 404
    assert as_owner_a.post(mk_url(org_a, 31337, "revoke")).status_code == 404
