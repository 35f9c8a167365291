"""Issue 34 item 8: a key's spend over time, beside its cap (usage page, narrowed to the key)."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.models import ApiKey
from billing.key_spend import counted_against_cap
from tests.dashboard.conftest import World, make_usage

D = [date(2026, 11, 29) + timedelta(days=i) for i in range(4)]  # Nov 29, 30, Dec 1, 2


@pytest.mark.parametrize(
    ("period", "before", "counted"),
    [
        ("day", 99, [1, 2, 3, 4]),  # each day on its own
        ("month", 10, [11, 13, 3, 7]),  # the month to date, from 0 on the 1st
        ("total", 10, [11, 13, 16, 20]),  # everything so far
    ],
)
def test_what_the_cap_counts(period: str, before: int, counted: list[int]) -> None:
    assert counted_against_cap(D, [1, 2, 3, 4], period, before) == counted


def test_usage_page_shows_the_keys_spend_and_cap(world: World) -> None:
    key = world.a.key
    ApiKey.objects.filter(pk=key.pk).update(spend_cap_nano=5_000_000_000, spend_cap_period="day")
    make_usage(world.a.org, key, "req_acme_spend_1", cost_nano=4_000_000_000)
    client = world.client(world.a.owner)
    html = client.get(reverse("dashboard:usage"), {"key": key.pk, "days": 7}).content.decode()
    card = html[html.index('id="key-spend"') :]
    card = card[: card.index("</section>")]
    assert "Cap: $5 / day" in card
    assert 'class="cap"' in card and "cap $5 / day" in card  # the dashed line and its label
    today = timezone.now().date().isoformat()
    assert f"<title>{today} · counted against the cap: $4.01</title>" in card  # + the fixture's
    keys = client.get(reverse("dashboard:keys")).content.decode()
    assert f'href="/dashboard/usage/?key={key.pk}&amp;days=30"' in keys
    # Another org's key id narrows nothing and shows no card.
    other = client.get(reverse("dashboard:usage"), {"key": world.b.key.pk}).content.decode()
    assert 'id="key-spend"' not in other
