"""Key lifecycle on the dashboard (issue 19): disable/enable, expiry, model allow-list and the
cap's period; bad input is a form error naming the field, and nothing is saved."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.models import ApiKey
from catalog.services import load_catalog
from tests.dashboard.conftest import World

OPUS = "anthropic/claude-opus-5-5"
SONNET = "anthropic/claude-sonnet-5-5"


@pytest.fixture(autouse=True)
def catalog(db: None) -> None:
    load_catalog()


def _html(response) -> str:  # type: ignore[no-untyped-def]
    return response.content.decode()


def test_create_with_period_models_and_expiry(world: World) -> None:
    client = world.client(world.a.owner)
    expires = (timezone.now() + timedelta(days=3)).astimezone(UTC).replace(second=0, microsecond=0)
    response = client.post(
        reverse("dashboard:key-create"),
        {
            "name": "scoped",
            "spend_cap_usd": "2",
            "spend_cap_period": "day",
            "allowed_models": [OPUS, SONNET],
            "expires_at": expires.strftime("%Y-%m-%dT%H:%M"),
        },
    )
    assert response.status_code == 302, _html(response)
    key = ApiKey.objects.get(org=world.a.org, name="scoped")
    assert key.spend_cap_period == "day"
    assert key.allowed_models == [OPUS, SONNET]
    assert key.expires_at == expires  # entered as UTC
    listing = _html(client.get(reverse("dashboard:keys")))
    assert OPUS in listing and "/ day" in listing
    assert expires.strftime("%Y-%m-%d %H:%M") in listing


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"expires_at": "2020-01-01T00:00"}, "The expiry must be in the future."),
        ({"allowed_models": ["openai/gpt-nothing"]}, "Select a valid choice."),
        ({"spend_cap_period": "weekly"}, "Select a valid choice."),
        ({"spend_cap_usd": "-1"}, "at least 0"),
    ],
)
def test_bad_input_is_a_form_error_and_nothing_is_saved(world: World, data, field) -> None:
    client = world.client(world.a.owner)
    before = ApiKey.objects.filter(org=world.a.org).count()
    response = client.post(reverse("dashboard:key-create"), {"name": "bad", **data})
    assert response.status_code == 200
    assert field in _html(response)
    assert ApiKey.objects.filter(org=world.a.org).count() == before
    key = world.a.key
    response = client.post(reverse("dashboard:key-edit", args=[key.pk]), {"name": "z", **data})
    assert response.status_code == 200 and field in _html(response)
    key.refresh_from_db()
    assert key.name != "z" and key.allowed_models == [] and key.expires_at is None


def test_editing_an_expired_key_keeps_its_expiry_unless_changed(world: World) -> None:
    client = world.client(world.a.owner)
    key = world.a.key
    past = datetime(2021, 5, 1, 12, 30, 45, tzinfo=UTC)  # seconds: finer than the input
    ApiKey.objects.filter(pk=key.pk).update(expires_at=past)
    page = _html(client.get(reverse("dashboard:key-edit", args=[key.pk])))
    assert 'value="2021-05-01T12:30"' in page
    response = client.post(
        reverse("dashboard:key-edit", args=[key.pk]),
        {"name": "still-expired", "expires_at": "2021-05-01T12:30"},
    )
    assert response.status_code == 302
    key.refresh_from_db()
    assert (key.name, key.expires_at) == ("still-expired", past)
    assert 'data-status="expired"' in _html(client.get(reverse("dashboard:keys")))


def test_disable_and_enable_are_owner_only_posts(world: World) -> None:
    key = world.a.key
    member = world.client(world.member_a)
    assert member.post(reverse("dashboard:key-disable", args=[key.pk])).status_code == 403
    stranger = world.client(world.b.owner)
    assert stranger.post(reverse("dashboard:key-disable", args=[key.pk])).status_code == 404
    key.refresh_from_db()
    assert key.disabled_at is None

    owner = world.client(world.a.owner)
    assert owner.get(reverse("dashboard:key-disable", args=[key.pk])).status_code == 405
    assert owner.post(reverse("dashboard:key-disable", args=[key.pk])).status_code == 302
    key.refresh_from_db()
    assert key.disabled_at is not None
    listing = _html(owner.get(reverse("dashboard:keys")))
    assert 'data-status="disabled"' in listing
    assert reverse("dashboard:key-enable", args=[key.pk]) in listing
    assert owner.post(reverse("dashboard:key-enable", args=[key.pk])).status_code == 302
    key.refresh_from_db()
    assert key.disabled_at is None
