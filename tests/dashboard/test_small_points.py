"""Issue 34's small points: switching org keeps the page's range (and nothing of the old org's),
a favicon is served, and every dashboard page starts with a skip link to its content."""

from __future__ import annotations

from django.test import Client
from django.urls import reverse

from accounts.models import Membership
from tests.dashboard.conftest import World


def test_switching_org_keeps_the_range(world: World) -> None:
    Membership.objects.create(user=world.member_a, org=world.b.org, role="member")
    client = world.client(world.member_a)
    usage = reverse("dashboard:usage")
    html = client.get(usage + "?days=30&split=key").content.decode()
    assert f'name="next" value="{usage}?days=30&amp;split=key"' in html
    response = client.post(
        reverse("dashboard:switch-org"),
        {"org": world.b.org.pk, "next": f"{usage}?days=30&key={world.a.key.pk}&org=1&page=2"},
    )
    # The range stays; the old org's key, the page and any ?org= do not.
    assert response.status_code == 302 and response["Location"] == f"{usage}?days=30"


def test_favicon_and_skip_link(world: World) -> None:
    icon = Client().get("/favicon.ico")
    assert icon.status_code == 301 and icon["Location"].endswith("ezat/favicon.svg")
    html = world.client(world.a.owner).get(reverse("dashboard:home")).content.decode()
    assert 'rel="icon"' in html
    body = html[html.index("<body") :]
    first_link = body[body.index("<a ") : body.index("</a>")]
    assert 'href="#main"' in first_link and "Skip to content" in first_link
    assert '<main id="main"' in html
