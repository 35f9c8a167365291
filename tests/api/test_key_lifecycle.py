"""Key lifecycle in the management API (issue 19): disable/enable, expiry, model allow-list and
the spend cap's period; validation answers 400 naming the field, and nothing is saved."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import ApiKey, Organization
from catalog.services import load_catalog
from tests.api.conftest import make_usage

pytestmark = pytest.mark.django_db

OPUS = "anthropic/claude-opus-5-5"
OPUS_5 = "anthropic/claude-opus-5"
SONNET = "anthropic/claude-sonnet-5-5"


@pytest.fixture(autouse=True)
def catalog(db: Any) -> None:
    load_catalog()


def keys_url(org: Organization, key: ApiKey | int | None = None, action: str = "") -> str:
    base = f"/api/v1/orgs/{org.pk}/keys"
    if key is not None:
        base += f"/{key if isinstance(key, int) else key.pk}"
    return base + (f"/{action}" if action else "")


def test_create_with_every_lifecycle_field(org_a: Organization, as_owner_a: APIClient) -> None:
    expires = (timezone.now() + timedelta(days=30)).replace(microsecond=0)
    response = as_owner_a.post(
        keys_url(org_a),
        {
            "name": "ci",
            "spend_cap_usd": "5",
            "spend_cap_period": "day",
            "allowed_models": ["claude-opus-5", SONNET.upper(), "claude-opus-5"],
            "expires_at": expires.isoformat(),
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    # aliases and case normalised to canonical ids, each once, in the order given
    assert body["allowed_models"] == [OPUS_5, SONNET]
    assert body["spend_cap_period"] == "day"
    assert body["spend_cap_usd"] == "5"
    assert body["period_spend_usd"] == "0"
    assert body["status"] == "active" and body["disabled"] is False
    key = ApiKey.objects.get(pk=body["id"])
    assert key.expires_at == expires
    assert (key.spend_cap_period, key.allowed_models) == ("day", [OPUS_5, SONNET])


def test_defaults_keep_the_old_behaviour(org_a: Organization, as_owner_a: APIClient) -> None:
    body = as_owner_a.post(keys_url(org_a), {"name": "plain"}, format="json").json()
    assert body["spend_cap_period"] == "month"
    assert body["allowed_models"] == []
    assert body["expires_at"] is None and body["disabled_at"] is None


@pytest.mark.parametrize(
    ("payload", "field", "fragment"),
    [
        ({"allowed_models": ["claude-opus-5", "gpt-9"]}, "allowed_models", "allowed_models[1]"),
        ({"allowed_models": ["ezat/auto"]}, "allowed_models", "chain"),
        ({"allowed_models": "claude-opus-5"}, "allowed_models", "list"),
        ({"expires_at": "2020-01-01T00:00:00Z"}, "expires_at", "future"),
        ({"expires_at": "tomorrow"}, "expires_at", "format"),
        ({"spend_cap_period": "weekly"}, "spend_cap_period", "weekly"),
        ({"spend_cap_usd": "-1"}, "spend_cap_usd", ""),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_saves_nothing(
    org_a: Organization, key_a: ApiKey, as_owner_a: APIClient, payload: dict, field: str, fragment
) -> None:
    before = ApiKey.objects.filter(org=org_a).count()
    created = as_owner_a.post(keys_url(org_a), {"name": "x", **payload}, format="json")
    assert created.status_code == 400, created.content
    assert field in created.json()
    assert fragment in " ".join(created.json()[field])
    assert ApiKey.objects.filter(org=org_a).count() == before
    patched = as_owner_a.patch(keys_url(org_a, key_a), payload, format="json")
    assert patched.status_code == 400, patched.content
    assert field in patched.json()
    fresh = ApiKey.objects.get(pk=key_a.pk)
    assert (fresh.allowed_models, fresh.expires_at, fresh.spend_cap_period) == ([], None, "month")


def test_patch_sets_and_clears_the_lifecycle_fields(
    org_a: Organization, key_a: ApiKey, as_owner_a: APIClient
) -> None:
    expires = timezone.now() + timedelta(hours=2)
    body = as_owner_a.patch(
        keys_url(org_a, key_a),
        {"allowed_models": [OPUS], "expires_at": expires.isoformat(), "spend_cap_period": "total"},
        format="json",
    ).json()
    assert body["allowed_models"] == [OPUS]
    assert body["spend_cap_period"] == "total"
    assert body["expires_at"] is not None
    # absent fields keep their value
    kept = as_owner_a.patch(keys_url(org_a, key_a), {"name": "renamed"}, format="json").json()
    assert kept["allowed_models"] == [OPUS] and kept["spend_cap_period"] == "total"
    cleared = as_owner_a.patch(
        keys_url(org_a, key_a), {"allowed_models": None, "expires_at": None}, format="json"
    ).json()
    assert cleared["allowed_models"] == [] and cleared["expires_at"] is None


def test_disable_and_enable(org_a: Organization, key_a: ApiKey, as_owner_a: APIClient) -> None:
    disabled = as_owner_a.post(keys_url(org_a, key_a, "disable"))
    assert disabled.status_code == 200, disabled.content
    assert disabled.json()["status"] == "disabled" and disabled.json()["disabled"] is True
    first = ApiKey.objects.get(pk=key_a.pk).disabled_at
    assert first is not None
    # idempotent: a second disable keeps the first time
    as_owner_a.post(keys_url(org_a, key_a, "disable"))
    assert ApiKey.objects.get(pk=key_a.pk).disabled_at == first
    enabled = as_owner_a.post(keys_url(org_a, key_a, "enable")).json()
    assert enabled["status"] == "active" and enabled["disabled_at"] is None
    # PATCH {"disabled": …} does the same
    assert (
        as_owner_a.patch(keys_url(org_a, key_a), {"disabled": True}, format="json").json()["status"]
        == "disabled"
    )
    assert (
        as_owner_a.patch(keys_url(org_a, key_a), {"disabled": False}, format="json").json()[
            "status"
        ]
        == "active"
    )


def test_members_cannot_disable_and_strangers_get_404(
    org_a: Organization, key_a: ApiKey, as_member_a: APIClient, as_owner_b: APIClient
) -> None:
    assert as_member_a.post(keys_url(org_a, key_a, "disable")).status_code == 403
    assert as_owner_b.post(keys_url(org_a, key_a, "disable")).status_code == 404
    assert ApiKey.objects.get(pk=key_a.pk).disabled_at is None


def test_a_revoked_key_cannot_be_enabled_or_changed(
    org_a: Organization, key_a: ApiKey, as_owner_a: APIClient
) -> None:
    as_owner_a.post(keys_url(org_a, key_a, "revoke"))
    enable = as_owner_a.post(keys_url(org_a, key_a, "enable"))
    assert enable.status_code == 400
    patch = as_owner_a.patch(keys_url(org_a, key_a), {"disabled": False}, format="json")
    assert patch.status_code == 400
    assert as_owner_a.get(keys_url(org_a, key_a)).json()["status"] == "revoked"


def test_an_expired_key_reads_expired(
    org_a: Organization, key_a: ApiKey, as_owner_a: APIClient
) -> None:
    ApiKey.objects.filter(pk=key_a.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    assert as_owner_a.get(keys_url(org_a, key_a)).json()["status"] == "expired"
    # still changeable: extending the expiry makes it active again
    future = (timezone.now() + timedelta(days=1)).isoformat()
    body = as_owner_a.patch(keys_url(org_a, key_a), {"expires_at": future}, format="json").json()
    assert body["status"] == "active"


def test_period_spend_follows_the_cap_period(
    org_a: Organization, key_a: ApiKey, as_owner_a: APIClient
) -> None:
    make_usage(org_a, key_a, cost_nano=3_000_000_000)  # $3 now
    make_usage(
        org_a, key_a, cost_nano=2_000_000_000, created_at=timezone.now() - timedelta(days=400)
    )
    for period, spent in (("month", "3"), ("day", "3"), ("total", "5")):
        body = as_owner_a.patch(
            keys_url(org_a, key_a), {"spend_cap_period": period}, format="json"
        ).json()
        assert body["period_spend_usd"] == spent, period
