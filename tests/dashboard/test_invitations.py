"""Invitations on the dashboard (issue 13, item 6): nobody joins an org without accepting.

Owners invite by e-mail; the answer is the same for every address (an account, nobody, a member
already, a staff account), down to the queries it makes; staff accounts can neither receive nor
accept one; invitations expire after 7 days (on a clock the tests move), can be withdrawn, and
accepting twice changes nothing.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from accounts import invitations
from accounts.models import Invitation, Membership
from tests.dashboard.conftest import PASSWORD, World

LINK = re.compile(r"https?://[^\s]+/dashboard/invitations/join/[^\s/]+/")


@pytest.fixture
def dave(db: Any) -> Any:
    """An account in no org, the usual invitee."""
    return get_user_model().objects.create_user(
        username="dave", email="dave@example.test", password=PASSWORD
    )


@pytest.fixture
def staff(db: Any) -> Any:
    return get_user_model().objects.create_user(
        username="ops", email="ops@ezat.test", password=PASSWORD, is_staff=True
    )


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The invitations' clock, frozen at a start instant; tests move it with `clock[0] += …`."""
    now = [timezone.now()]
    monkeypatch.setattr(invitations, "now", lambda: now[0])
    return now


def invite(client: Client, email: str, role: str = "member") -> Any:
    return client.post(reverse("dashboard:member-invite"), {"email": email, "role": role})


def mails_to(mailoutbox: list[Any], address: str) -> list[Any]:
    invitations.flush()  # delivery runs on the mail thread
    return [m for m in mailoutbox if address in m.to]


def _shape(sql: str) -> str:
    """A query without its values or savepoint names: what it does, not with what."""
    return re.sub(r"'[^']*'|\b\d+\b|\"s\d+_x\d+\"", "?", sql)


def listed(client: Client) -> set[int]:
    """Ids of the invitations on the signed-in account's invitations page."""
    html = client.get(reverse("dashboard:invitations")).content.decode()
    return {int(pk) for pk in re.findall(r'data-invitation="(\d+)"', html)}


def link_in(message: Any) -> str:
    match = LINK.search(message.body)
    assert match, message.body
    return match.group(0)


def path_of(link: str) -> str:
    return "/" + link.split("/", 3)[3]


def test_invited_account_joins_only_by_accepting_from_its_dashboard(
    world: World, dave: Any, mailoutbox: list[Any], clock: list[Any]
) -> None:
    owner = world.client(world.a.owner)
    assert invite(owner, "Dave@Example.test", "owner").status_code == 302
    assert not Membership.objects.filter(user=dave).exists(), "inviting adds nobody"

    [mail] = mails_to(mailoutbox, "dave@example.test")
    assert "Acme" in mail.subject and "alice" in mail.body
    members_page = owner.get(reverse("dashboard:members")).content.decode()
    assert "dave@example.test" in members_page and 'id="invitations"' in members_page

    invitee = world.client(dave)
    page = invitee.get(reverse("dashboard:invitations")).content.decode()
    assert "Acme" in page and "Accept" in page
    invitation = Invitation.objects.get(email="dave@example.test")
    accept = reverse("dashboard:invitation-accept", args=[invitation.pk])
    response = invitee.post(accept)
    assert response.status_code == 302
    assert Membership.objects.get(user=dave, org=world.a.org).role == "owner"
    # Accepting twice is idempotent: same answer, one membership, role unchanged.
    assert invitee.post(accept).status_code == 302
    assert Membership.objects.filter(user=dave).count() == 1
    assert listed(invitee) == set()


def test_the_signed_link_accepts_with_a_post(
    world: World, dave: Any, mailoutbox: list[Any], clock: list[Any]
) -> None:
    invite(world.client(world.a.owner), "dave@example.test")
    path = path_of(link_in(mails_to(mailoutbox, "dave@example.test")[0]))
    assert Client().get(path).status_code == 302  # sign in first
    invitee = world.client(dave)
    page = invitee.get(path)
    assert page.status_code == 200 and "Join Acme" in page.content.decode()
    assert not Membership.objects.filter(user=dave).exists(), "a GET (link scanner) joins nobody"
    assert invitee.post(path).status_code == 302
    assert Membership.objects.get(user=dave, org=world.a.org).role == "member"
    assert invitee.post(path).status_code == 302  # twice: idempotent
    assert invitee.get(path).status_code == 200
    assert Membership.objects.filter(user=dave).count() == 1
    # Someone else holding the used link cannot reuse it.
    used = world.client(world.b.owner).post(path)
    assert used.status_code == 410 and "already been used" in used.content.decode()
    assert not Membership.objects.filter(user=world.b.owner, org=world.a.org).exists()


def test_answer_is_the_same_for_known_unknown_member_and_staff_addresses(
    world: World, dave: Any, staff: Any, mailoutbox: list[Any], clock: list[Any]
) -> None:
    """No enumeration: same status, redirect, message and the same queries (timing shape)."""
    owner = world.client(world.a.owner)
    invite(owner, "warmup@example.test")  # first-request effects (session, caches) out of the way
    answers = []
    for address in (
        "dave@example.test",  # an account in no org
        "nobody@example.test",  # no account
        "bob@example.test",  # a member already
        "ops@ezat.test",  # a staff account
    ):
        with CaptureQueriesContext(connection) as queries:
            response = invite(owner, address)
        flashed = [str(m) for m in get_messages(response.wsgi_request)][-1:]
        flashed = [m.replace(address, "<addr>") for m in flashed]
        shape = [_shape(q["sql"]) for q in queries.captured_queries]
        answers.append((response.status_code, response["Location"], flashed, shape))
    assert all(answer == answers[0] for answer in answers), answers
    assert answers[0][0] == 302 and "Invitation sent to <addr>" in answers[0][2][0]
    bad = [invite(owner, "not-an-address").status_code, invite(owner, "").status_code]
    assert bad == [400, 400]


def test_staff_accounts_cannot_be_invited(
    world: World, staff: Any, mailoutbox: list[Any], clock: list[Any]
) -> None:
    invite(world.client(world.a.owner), "ops@ezat.test", "owner")
    assert mails_to(mailoutbox, "ops@ezat.test") == [], "never delivered to a staff address"
    invitation = Invitation.objects.get(email="ops@ezat.test")
    as_staff = world.client(staff)
    assert listed(as_staff) == set()
    accept = as_staff.post(reverse("dashboard:invitation-accept", args=[invitation.pk]))
    assert accept.status_code == 403
    # Even holding a valid link (composed, never sent), a staff account cannot accept it.
    path = reverse("dashboard:invitation-link", args=[invitations.make_token(invitation.pk)])
    for response in (as_staff.get(path), as_staff.post(path)):
        assert response.status_code == 403
        assert "cannot join customer organizations" in response.content.decode()
    assert not Membership.objects.filter(user=staff).exists()


def test_expired_link_gets_a_clear_page(
    world: World, dave: Any, mailoutbox: list[Any], clock: list[Any]
) -> None:
    invite(world.client(world.a.owner), "dave@example.test")
    path = path_of(link_in(mails_to(mailoutbox, "dave@example.test")[0]))
    invitee = world.client(dave)
    clock[0] += timedelta(days=7) - timedelta(seconds=1)
    assert invitee.get(path).status_code == 200  # still valid a second before
    clock[0] += timedelta(seconds=1)
    for response in (invitee.get(path), invitee.post(path)):
        assert response.status_code == 410
        assert "has expired" in response.content.decode()
    assert listed(invitee) == set()
    invitation = Invitation.objects.get(email="dave@example.test")
    from_list = invitee.post(reverse("dashboard:invitation-accept", args=[invitation.pk]))
    assert from_list.status_code == 410
    assert not Membership.objects.filter(user=dave).exists()


def test_tampered_link_gets_a_clear_page(
    world: World, dave: Any, mailoutbox: list[Any], clock: list[Any]
) -> None:
    invite(world.client(world.a.owner), "dave@example.test")
    path = path_of(link_in(mails_to(mailoutbox, "dave@example.test")[0]))
    other = Invitation.objects.get(email="dave@example.test").pk + 1
    token = path.rstrip("/").rsplit("/", 1)[1]
    forged = token.replace(token.split(":")[0], invitations.make_token(other).split(":")[0])
    invitee = world.client(dave)
    for bad in (forged, token[:-2] + "xx", "nonsense"):
        response = invitee.get(reverse("dashboard:invitation-link", args=[bad]))
        assert response.status_code == 400
        assert "not valid" in response.content.decode()
        assert invitee.post(reverse("dashboard:invitation-link", args=[bad])).status_code == 400
    assert not Membership.objects.filter(user=dave).exists()


def test_owner_withdraws_an_invitation(
    world: World, dave: Any, mailoutbox: list[Any], clock: list[Any]
) -> None:
    owner = world.client(world.a.owner)
    invite(owner, "dave@example.test")
    path = path_of(link_in(mails_to(mailoutbox, "dave@example.test")[0]))
    invitation = Invitation.objects.get(email="dave@example.test")
    revoke = reverse("dashboard:invitation-revoke", args=[invitation.pk])
    # Not by a member, nor by another org's owner (404: not even confirmed to exist).
    assert world.client(world.member_a).post(revoke).status_code == 403
    assert world.client(world.b.owner).post(revoke).status_code == 404
    assert owner.post(revoke).status_code == 302
    assert owner.post(revoke).status_code == 302  # idempotent
    members_page = owner.get(reverse("dashboard:members")).content.decode()
    assert f'data-invitation="{invitation.pk}"' not in members_page
    response = world.client(dave).post(path)
    assert response.status_code == 410 and "withdrawn" in response.content.decode()
    assert not Membership.objects.filter(user=dave).exists()


def test_dashboard_list_accepts_only_invitations_to_my_address(
    world: World, dave: Any, mailoutbox: list[Any], clock: list[Any]
) -> None:
    invite(world.client(world.a.owner), "someone-else@example.test")
    invitation = Invitation.objects.get(email="someone-else@example.test")
    invitee = world.client(dave)
    assert listed(invitee) == set()
    response = invitee.post(reverse("dashboard:invitation-accept", args=[invitation.pk]))
    assert response.status_code == 404
    assert not Membership.objects.filter(user=dave).exists()


def test_reinviting_replaces_the_pending_invitation(
    world: World, dave: Any, mailoutbox: list[Any], clock: list[Any]
) -> None:
    owner = world.client(world.a.owner)
    invite(owner, "dave@example.test")
    first = path_of(link_in(mails_to(mailoutbox, "dave@example.test")[0]))
    invite(owner, "dave@example.test", "owner")
    second = path_of(link_in(mails_to(mailoutbox, "dave@example.test")[1]))
    invitee = world.client(dave)
    assert invitee.post(first).status_code == 410
    assert invitee.post(second).status_code == 302
    assert Membership.objects.get(user=dave, org=world.a.org).role == "owner"
