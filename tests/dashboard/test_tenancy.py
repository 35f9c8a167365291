"""Nobody sees or changes another org's keys, usage, requests or ledger, on any dashboard page."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import ApiKey, Membership
from tests.dashboard.conftest import World

PAGES = (
    "dashboard:home",
    "dashboard:keys",
    "dashboard:usage",
    "dashboard:requests",
    "dashboard:balance",
    "dashboard:members",
    "dashboard:fallbacks",
)
PAGE_QUERIES = ("", "?split=key", "?days=90")


def _html(response) -> str:  # type: ignore[no-untyped-def]
    return response.content.decode()


def _table_body(html: str) -> str:
    """The rows of the request log (the filter form and the sort links echo what was typed,
    harmlessly)."""
    return html.split('id="request-log"', 1)[1].split("<tbody>", 1)[1].split("</table>", 1)[0]


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("who", ["a", "b"])
def test_pages_show_only_own_org(world: World, page: str, who: str) -> None:
    mine, theirs = (world.a, world.b) if who == "a" else (world.b, world.a)
    client = world.client(mine.owner)
    for query in PAGE_QUERIES:
        response = client.get(reverse(page) + query)
        assert response.status_code == 200
        html = _html(response)
        for marker in theirs.markers:
            assert marker not in html, f"{page}{query} leaks {marker!r} of the other org"
        assert theirs.org.name not in html


@pytest.mark.parametrize("page", PAGES)
def test_member_sees_own_org_data(world: World, page: str) -> None:
    client = world.client(world.member_a)
    response = client.get(reverse(page))
    assert response.status_code == 200
    html = _html(response)
    for marker in world.b.markers:
        assert marker not in html


def test_each_page_shows_own_data(world: World) -> None:
    client = world.client(world.a.owner)
    a = world.a
    assert a.key.prefix in _html(client.get(reverse("dashboard:keys")))
    assert a.request_id in _html(client.get(reverse("dashboard:requests")))
    assert "acme-credit-memo" in _html(client.get(reverse("dashboard:balance")))
    assert "$50.00" in _html(client.get(reverse("dashboard:balance")))
    usage = _html(client.get(reverse("dashboard:usage") + "?split=key"))
    assert "acme-prod-key" in usage and "<svg" in usage


@pytest.mark.parametrize("page", PAGES)
def test_foreign_org_id_is_404(world: World, page: str) -> None:
    client = world.client(world.a.owner)
    assert client.get(reverse(page) + f"?org={world.b.org.pk}").status_code == 404
    assert client.get(reverse(page) + "?org=999999").status_code == 404
    assert client.get(reverse(page) + "?org=not-a-number").status_code == 404
    # The failed attempt did not switch the session to the other org.
    assert world.b.request_id not in _html(client.get(reverse("dashboard:requests")))


def test_anonymous_is_sent_to_login(world: World) -> None:
    for page in PAGES:
        response = Client().get(reverse(page))
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")


def test_cannot_touch_other_orgs_keys(world: World) -> None:
    client = world.client(world.a.owner)
    key_b = world.b.key
    assert client.get(reverse("dashboard:key-edit", args=[key_b.pk])).status_code == 404
    response = client.post(
        reverse("dashboard:key-edit", args=[key_b.pk]), {"name": "pwned", "rpm_limit": "1"}
    )
    assert response.status_code == 404
    assert client.post(reverse("dashboard:key-revoke", args=[key_b.pk])).status_code == 404
    key_b.refresh_from_db()
    assert key_b.is_active and key_b.name == "globex-prod-key" and key_b.rpm_limit == 60


def test_cannot_filter_requests_by_other_orgs_key_or_id(world: World) -> None:
    client = world.client(world.a.owner)
    by_key = _html(client.get(reverse("dashboard:requests") + f"?key={world.b.key.pk}"))
    by_id = _html(client.get(reverse("dashboard:requests") + f"?request_id={world.b.request_id}"))
    for html in (by_key, by_id):
        for marker in world.b.markers:
            assert marker not in _table_body(html)
        assert "globex-prod-key" not in html  # not even as a filter choice
    assert "No requests match these filters" in by_id


def test_cannot_change_other_orgs_members(world: World) -> None:
    client = world.client(world.a.owner)
    carol_membership = Membership.objects.get(org=world.b.org, user=world.b.owner)
    url = reverse("dashboard:member-role", args=[carol_membership.pk])
    assert client.post(url, {"role": "member"}).status_code == 404
    carol_membership.refresh_from_db()
    assert carol_membership.role == "owner"


def test_org_switcher_only_switches_to_own_orgs(world: World) -> None:
    # bob joins Globex too: he now has two orgs and a switcher.
    Membership.objects.create(user=world.member_a, org=world.b.org, role="member")
    client = world.client(world.member_a)
    html = _html(client.get(reverse("dashboard:requests")))
    assert 'id="org-switch"' in html and world.a.request_id in html
    response = client.post(
        reverse("dashboard:switch-org"),
        {"org": world.b.org.pk, "next": reverse("dashboard:requests")},
    )
    assert response.status_code == 302 and response["Location"] == reverse("dashboard:requests")
    html = _html(client.get(reverse("dashboard:requests")))
    assert world.b.request_id in html and world.a.request_id not in html
    # carol (Globex only) cannot switch into Acme.
    carol = world.client(world.b.owner)
    assert carol.post(reverse("dashboard:switch-org"), {"org": world.a.org.pk}).status_code == 404


def test_switch_rejects_offsite_next(world: World) -> None:
    client = world.client(world.a.owner)
    response = client.post(
        reverse("dashboard:switch-org"), {"org": world.a.org.pk, "next": "https://evil.example/"}
    )
    assert response["Location"] == reverse("dashboard:home")


def test_user_without_org_sees_explanation(db: object) -> None:
    from django.contrib.auth import get_user_model

    loner = get_user_model().objects.create_user("loner", password="x-pass-12345")
    client = Client()
    client.force_login(loner)
    response = client.get(reverse("dashboard:home"))
    assert response.status_code == 403
    assert "not a member of any organization" in _html(response)


def test_keys_scoped_per_org_in_db(world: World) -> None:
    """Sanity: the fixture really gives each org exactly its own key."""
    assert list(ApiKey.objects.filter(org=world.a.org)) == [world.a.key]
    assert list(ApiKey.objects.filter(org=world.b.org)) == [world.b.key]
