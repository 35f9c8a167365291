"""Key management on the dashboard: owners only, the secret shown once, CSRF enforced."""

from __future__ import annotations

import hashlib
import re

from django.test import Client
from django.urls import reverse

from accounts.models import ApiKey, Invitation, Membership
from tests.dashboard.conftest import World


def _html(response) -> str:  # type: ignore[no-untyped-def]
    return response.content.decode()


def _secret_from(html: str) -> str:
    match = re.search(r'id="new-key-secret" value="(ezat_sk_[0-9A-Za-z]+)"', html)
    assert match, "the new key's secret is on the creation response"
    return match.group(1)


def test_owner_creates_key_and_secret_is_shown_once(world: World) -> None:
    client = world.client(world.a.owner)
    response = client.post(
        reverse("dashboard:key-create"),
        {"name": "ci-runner", "rpm_limit": "120", "spend_cap_usd": "25.50"},
        follow=True,  # Post/Redirect/Get: the secret is on the page the redirect leads to
    )
    assert response.status_code == 200 and len(response.redirect_chain) == 1
    assert "no-store" in response["Cache-Control"]
    secret = _secret_from(_html(response))
    key = ApiKey.objects.get(org=world.a.org, name="ci-runner")
    assert key.key_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert key.rpm_limit == 120 and key.spend_cap_nano == 25_500_000_000
    assert key.created_by == world.a.owner
    # Never again: not on the list, the edit page, the overview, nor in the session.
    for url in (
        response.redirect_chain[0][0],  # a reload of the result page
        reverse("dashboard:keys"),
        reverse("dashboard:key-edit", args=[key.pk]),
        reverse("dashboard:home"),
        reverse("dashboard:key-create"),
    ):
        html = _html(client.get(url))
        assert secret not in html
        assert secret[len(key.prefix) :] not in html
    assert secret not in str(dict(client.session.items()))
    assert key.prefix in _html(client.get(reverse("dashboard:keys")))


def test_owner_edits_limits_and_revokes(world: World) -> None:
    client = world.client(world.a.owner)
    key = world.a.key
    response = client.post(
        reverse("dashboard:key-edit", args=[key.pk]),
        {"name": "renamed", "rpm_limit": "", "spend_cap_usd": "0.000000001"},
    )
    assert response.status_code == 302
    key.refresh_from_db()
    assert (key.name, key.rpm_limit, key.spend_cap_nano) == ("renamed", None, 1)
    # Bad input is a form error, not a 500, and changes nothing.
    response = client.post(
        reverse("dashboard:key-edit", args=[key.pk]), {"rpm_limit": "0", "spend_cap_usd": "-1"}
    )
    assert response.status_code == 200 and "error" in _html(response)
    key.refresh_from_db()
    assert key.spend_cap_nano == 1
    # Revoke: POST only.
    assert client.get(reverse("dashboard:key-revoke", args=[key.pk])).status_code == 405
    assert client.post(reverse("dashboard:key-revoke", args=[key.pk])).status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert "revoked" in _html(client.get(reverse("dashboard:keys")))
    # A revoked key cannot be edited back to life.
    client.post(reverse("dashboard:key-edit", args=[key.pk]), {"name": "x"})
    key.refresh_from_db()
    assert key.name == "renamed"


def test_member_cannot_create_edit_or_revoke(world: World) -> None:
    client = world.client(world.member_a)
    key = world.a.key
    html = _html(client.get(reverse("dashboard:keys")))
    assert key.prefix in html  # members may look
    assert "Create key" not in html and "Revoke" not in html
    assert client.get(reverse("dashboard:key-create")).status_code == 403
    assert client.post(reverse("dashboard:key-create"), {"name": "sneaky"}).status_code == 403
    assert (
        client.post(reverse("dashboard:key-edit", args=[key.pk]), {"name": "x"}).status_code == 403
    )
    assert client.post(reverse("dashboard:key-revoke", args=[key.pk])).status_code == 403
    assert not ApiKey.objects.filter(name="sneaky").exists()
    key.refresh_from_db()
    assert key.is_active and key.name == "acme-prod-key"


def test_member_cannot_manage_members(world: World) -> None:
    client = world.client(world.member_a)
    assert "Invite someone" not in _html(client.get(reverse("dashboard:members")))
    response = client.post(
        reverse("dashboard:member-invite"), {"email": "carol@example.test", "role": "owner"}
    )
    assert response.status_code == 403
    assert not Invitation.objects.exists()
    bob = Membership.objects.get(org=world.a.org, user=world.member_a)
    response = client.post(reverse("dashboard:member-role", args=[bob.pk]), {"role": "owner"})
    assert response.status_code == 403
    bob.refresh_from_db()
    assert bob.role == "member"
    assert not Membership.objects.filter(org=world.a.org, user=world.b.owner).exists()


def test_owner_manages_members(world: World) -> None:
    """Owners invite (nobody is added without accepting), change roles and remove members."""
    client = world.client(world.a.owner)
    response = client.post(
        reverse("dashboard:member-invite"), {"email": "CAROL@example.test", "role": "member"}
    )
    assert response.status_code == 302
    assert not Membership.objects.filter(org=world.a.org, user=world.b.owner).exists()
    assert Invitation.objects.get(org=world.a.org).email == "carol@example.test"
    bob = Membership.objects.get(org=world.a.org, user=world.member_a)
    client.post(reverse("dashboard:member-role", args=[bob.pk]), {"role": "owner"})
    bob.refresh_from_db()
    assert bob.role == "owner"


def test_last_owner_cannot_be_demoted(world: World) -> None:
    client = world.client(world.a.owner)
    alice = Membership.objects.get(org=world.a.org, user=world.a.owner)
    client.post(reverse("dashboard:member-role", args=[alice.pk]), {"role": "member"})
    alice.refresh_from_db()
    assert alice.role == "owner"


def test_owner_removes_a_member_but_not_the_last_owner(world: World) -> None:
    client = world.client(world.a.owner)
    bob = Membership.objects.get(org=world.a.org, user=world.member_a)
    url = reverse("dashboard:member-remove", args=[bob.pk])
    assert client.post(url, {"confirm": "yes"}).status_code == 302
    assert not Membership.objects.filter(pk=bob.pk).exists()
    # bob no longer sees org A at all
    assert world.client(world.member_a).get(
        reverse("dashboard:keys") + f"?org={world.a.org.pk}"
    ).status_code in (302, 404)
    alice = Membership.objects.get(org=world.a.org, user=world.a.owner)
    client.post(reverse("dashboard:member-remove", args=[alice.pk]), {"confirm": "yes"})
    assert Membership.objects.filter(pk=alice.pk).exists()  # the last owner stays


def test_members_and_other_orgs_cannot_remove_members(world: World) -> None:
    alice = Membership.objects.get(org=world.a.org, user=world.a.owner)
    bob_client = world.client(world.member_a)
    url = reverse("dashboard:member-remove", args=[alice.pk])
    assert bob_client.post(url, {"confirm": "yes"}).status_code == 403
    carol_client = world.client(world.b.owner)  # owner of B: A's members are not hers
    response = carol_client.post(url, {"confirm": "yes"})
    assert response.status_code == 404
    assert Membership.objects.filter(pk=alice.pk).exists()


def test_csrf_is_enforced_on_dashboard_forms(world: World) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.a.owner)
    key = world.a.key
    assert client.post(reverse("dashboard:key-create"), {"name": "no-token"}).status_code == 403
    assert client.post(reverse("dashboard:key-revoke", args=[key.pk])).status_code == 403
    assert client.post(reverse("dashboard:switch-org"), {"org": world.a.org.pk}).status_code == 403
    assert not ApiKey.objects.filter(name="no-token").exists()
    key.refresh_from_db()
    assert key.is_active
    # With the token from the form page, the same POST works.
    page = client.get(reverse("dashboard:key-create"))
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', _html(page))
    assert token
    response = client.post(
        reverse("dashboard:key-create"),
        {"name": "with-token", "csrfmiddlewaretoken": token.group(1)},
    )
    assert response.status_code == 302
    assert ApiKey.objects.filter(name="with-token", org=world.a.org).exists()


def test_login_and_logout(world: World) -> None:
    client = Client(enforce_csrf_checks=False)
    response = client.post(reverse("login"), {"username": "alice", "password": "wrong"})
    assert response.status_code == 200 and "_auth_user_id" not in client.session
    response = client.post(
        reverse("login"), {"username": "alice", "password": "correct-horse-battery-1"}
    )
    assert response.status_code == 302 and response["Location"] == "/dashboard/"
    assert client.get("/dashboard/").status_code == 200
    assert client.get(reverse("logout")).status_code == 405  # sign-out is a POST (CSRF)
    assert client.post(reverse("logout")).status_code == 302
    assert client.get("/dashboard/").status_code == 302
