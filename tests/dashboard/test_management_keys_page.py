"""The management keys page (issue 19): owners only; the secret shown once (Post/Redirect/Get);
the key works on the management API until it is revoked; tenants see only their own keys."""

from __future__ import annotations

import re

from django.test import Client
from django.urls import reverse

from accounts.models import ManagementKey
from accounts.services import create_management_key
from tests.dashboard.conftest import World


def _html(response) -> str:  # type: ignore[no-untyped-def]
    return response.content.decode()


def _api(secret: str, org_id: int) -> int:
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client.get(f"/api/v1/orgs/{org_id}/keys").status_code


def test_owner_creates_a_management_key_shown_once_and_revokes_it(world: World) -> None:
    client = world.client(world.a.owner)
    url = reverse("dashboard:management-keys")
    response = client.post(url, {"name": "terraform"}, follow=True)
    assert response.status_code == 200 and len(response.redirect_chain) == 1
    assert "no-store" in response["Cache-Control"]
    match = re.search(r'id="new-key-secret" value="(ezat_mk_[0-9A-Za-z]+)"', _html(response))
    assert match, "the secret is on the page the redirect leads to"
    secret = match.group(1)
    key = ManagementKey.objects.get(org=world.a.org, name="terraform")
    assert key.created_by == world.a.owner
    # A reload shows nothing and mints nothing.
    again = client.get(response.redirect_chain[0][0], follow=True)
    assert secret not in _html(again)
    assert ManagementKey.objects.filter(org=world.a.org).count() == 1
    listing = _html(client.get(url))
    assert key.prefix in listing and secret not in listing
    assert reverse("api-docs") in listing
    # It works on the management API, until revoked.
    assert _api(secret, world.a.org.pk) == 200
    assert client.get(reverse("dashboard:management-key-revoke", args=[key.pk])).status_code == 405
    assert client.post(reverse("dashboard:management-key-revoke", args=[key.pk])).status_code == 302
    assert _api(secret, world.a.org.pk) == 401
    assert "revoked" in _html(client.get(url))


def test_members_get_403_and_other_orgs_keys_stay_hidden(world: World) -> None:
    other, _ = create_management_key(org=world.b.org, name="globex-secret-script")
    member = world.client(world.member_a)
    assert member.get(reverse("dashboard:management-keys")).status_code == 403
    assert member.post(reverse("dashboard:management-keys"), {"name": "x"}).status_code == 403
    assert not ManagementKey.objects.filter(org=world.a.org).exists()
    owner = world.client(world.a.owner)
    assert "globex-secret-script" not in _html(owner.get(reverse("dashboard:management-keys")))
    revoke = reverse("dashboard:management-key-revoke", args=[other.pk])
    assert owner.post(revoke).status_code == 404
    other.refresh_from_db()
    assert other.revoked_at is None
    # The keys page links the management keys page for owners only.
    assert reverse("dashboard:management-keys") in _html(owner.get(reverse("dashboard:keys")))
    assert reverse("dashboard:management-keys") not in _html(member.get(reverse("dashboard:keys")))
