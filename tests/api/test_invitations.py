"""Invitations through the management API (issue 13, item 6): owners and management keys
invite and withdraw, members read, and no call adds a member directly. The answer is the same
for every valid address; staff accounts never receive one; other tenants get 404s."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from accounts import invitations
from accounts.models import Invitation, Membership, Organization

pytestmark = pytest.mark.django_db

VOLATILE = ("id", "created_at", "expires_at")


def url(org: Organization, invitation: int | None = None) -> str:
    base = f"/api/v1/orgs/{org.pk}/invitations"
    return base if invitation is None else f"{base}/{invitation}"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    now = [timezone.now()]
    monkeypatch.setattr(invitations, "now", lambda: now[0])
    return now


@pytest.fixture
def dave() -> Any:
    return get_user_model().objects.create_user(
        username="dave", email="dave@example.test", password=None
    )


@pytest.fixture
def staff() -> Any:
    return get_user_model().objects.create_user(
        username="ops", email="ops@ezat.test", password=None, is_staff=True
    )


def _shape(sql: str) -> str:
    """A query without its values or savepoint names: what it does, not with what."""
    return re.sub(r"'[^']*'|\b\d+\b|\"s\d+_x\d+\"", "?", sql)


def sent_to(mailoutbox: list[Any], address: str) -> list[Any]:
    invitations.flush()
    return [m for m in mailoutbox if address in m.to]


def test_owner_invites_and_the_invitee_joins_only_by_accepting(
    org_a: Organization, as_owner_a: APIClient, dave: Any, mailoutbox: list[Any], clock: Any
) -> None:
    response = as_owner_a.post(url(org_a), {"email": "Dave@Example.test", "role": "owner"})
    assert response.status_code == 202
    body = response.json()
    assert body["email"] == "dave@example.test" and body["role"] == "owner"
    assert body["status"] == "pending" and body["invited_by"] == "owner-a"
    assert not Membership.objects.filter(user=dave).exists()
    [mail] = sent_to(mailoutbox, "dave@example.test")
    path = "/" + mail.body.split("http://testserver/", 1)[1].split()[0]
    invitee = Client()
    invitee.force_login(dave)
    assert invitee.post(path).status_code == 302
    assert Membership.objects.get(user=dave, org=org_a).role == "owner"
    assert as_owner_a.get(url(org_a)).json()["count"] == 0  # no longer pending
    assert as_owner_a.get(url(org_a, body["id"])).json()["status"] == "accepted"


def test_same_answer_for_known_unknown_member_and_staff_addresses(
    org_a: Organization,
    as_owner_a: APIClient,
    member_a: Any,
    dave: Any,
    staff: Any,
    mailoutbox: list[Any],
    clock: Any,
) -> None:
    member_a.email = "member-a@example.test"
    member_a.save()
    as_owner_a.post(url(org_a), {"email": "warmup@example.test"})  # first-call effects
    answers = []
    for address in (
        "dave@example.test",
        "nobody@example.test",
        "member-a@example.test",
        "ops@ezat.test",
    ):
        with CaptureQueriesContext(connection) as queries:
            response = as_owner_a.post(url(org_a), {"email": address})
        body = {k: v for k, v in response.json().items() if k not in VOLATILE}
        shape = [_shape(q["sql"]) for q in queries.captured_queries]
        answers.append((response.status_code, {**body, "email": "<addr>"}, shape))
    assert all(answer == answers[0] for answer in answers), answers
    assert answers[0][0] == 202
    assert sent_to(mailoutbox, "ops@ezat.test") == []  # staff: composed, never delivered
    assert len(sent_to(mailoutbox, "nobody@example.test")) == 1


def test_bad_input_names_the_field(org_a: Organization, as_owner_a: APIClient) -> None:
    for payload, field in (
        ({"email": "not-an-address"}, "email"),
        ({}, "email"),
        ({"email": "x@example.test", "role": "admin"}, "role"),
        ({"email": "x@example.test", "user": "carol"}, "user"),
    ):
        response = as_owner_a.post(url(org_a), payload, format="json")
        assert response.status_code == 400 and field in response.json(), (payload, response.json())
    assert not Invitation.objects.exists()


def test_staff_cannot_accept_even_with_the_link(
    org_a: Organization, as_owner_a: APIClient, staff: Any, clock: Any
) -> None:
    invitation_id = as_owner_a.post(url(org_a), {"email": "ops@ezat.test"}).json()["id"]
    path = reverse("dashboard:invitation-link", args=[invitations.make_token(invitation_id)])
    client = Client()
    client.force_login(staff)
    assert client.post(path).status_code == 403
    assert not Membership.objects.filter(user=staff).exists()


def test_management_key_invites_and_withdraws(
    org_a: Organization, as_mk_a: APIClient, mk_a: Any, dave: Any, clock: Any
) -> None:
    response = as_mk_a.post(url(org_a), {"email": "dave@example.test"})
    assert response.status_code == 202
    assert response.json()["invited_by"] == f"management-key:{mk_a[0].prefix}"
    invitation_id = response.json()["id"]
    assert as_mk_a.delete(url(org_a, invitation_id)).status_code == 204
    assert as_mk_a.delete(url(org_a, invitation_id)).status_code == 204  # idempotent
    assert as_mk_a.get(url(org_a, invitation_id)).json()["status"] == "revoked"
    path = reverse("dashboard:invitation-link", args=[invitations.make_token(invitation_id)])
    client = Client()
    client.force_login(dave)
    assert client.post(path).status_code == 410
    assert not Membership.objects.filter(user=dave).exists()


def test_members_read_owners_write_other_tenants_get_404(
    org_a: Organization,
    as_owner_a: APIClient,
    as_member_a: APIClient,
    as_owner_b: APIClient,
    clock: Any,
) -> None:
    invitation_id = as_owner_a.post(url(org_a), {"email": "x@example.test"}).json()["id"]
    assert as_member_a.get(url(org_a)).json()["count"] == 1
    assert as_member_a.post(url(org_a), {"email": "y@example.test"}).status_code == 403
    assert as_member_a.delete(url(org_a, invitation_id)).status_code == 403
    assert as_owner_b.get(url(org_a)).status_code == 404
    assert as_owner_b.post(url(org_a), {"email": "y@example.test"}).status_code == 404
    assert as_owner_b.delete(url(org_a, invitation_id)).status_code == 404
    assert Invitation.objects.get(pk=invitation_id).revoked_at is None
    assert Invitation.objects.count() == 1
    assert APIClient().post(url(org_a), {"email": "y@example.test"}).status_code == 401


def test_expired_invitations_are_not_pending_and_not_acceptable(
    org_a: Organization, as_owner_a: APIClient, dave: Any, clock: list[Any]
) -> None:
    invitation_id = as_owner_a.post(url(org_a), {"email": "dave@example.test"}).json()["id"]
    clock[0] += timedelta(days=7)
    assert as_owner_a.get(url(org_a)).json()["count"] == 0
    path = reverse("dashboard:invitation-link", args=[invitations.make_token(invitation_id)])
    client = Client()
    client.force_login(dave)
    response = client.post(path)
    assert response.status_code == 410 and "has expired" in response.content.decode()
    assert not Membership.objects.filter(user=dave).exists()


def test_no_api_call_adds_a_member_directly(org_a: Organization, as_owner_a: APIClient) -> None:
    paths = [p["path"] for p in _schema_paths(as_owner_a)]
    assert not [p for p in paths if "member" in p], paths


def _schema_paths(client: APIClient) -> list[dict[str, str]]:
    schema = client.get("/api/v1/schema?format=json").json()
    return [{"path": path} for path in schema["paths"]]
