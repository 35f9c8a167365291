"""Issue 34: a key's spend per day through /api/v1 (usage?group_by=day&key_id=), its cap beside
it on the key."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from rest_framework.test import APIClient

from accounts import services
from accounts.models import ApiKey, Organization
from tests.api.conftest import make_usage

pytestmark = pytest.mark.django_db


def test_spend_per_day_of_one_key(
    org_a: Organization, key_a: ApiKey, as_member_a: APIClient
) -> None:
    other = services.create_api_key(org=org_a, name="other").key
    services.update_api_key_limits(key=key_a, rpm_limit=100, spend_cap_nano=5_000_000_000)
    make_usage(org_a, key_a, cost_nano=1_000, created_at=datetime(2025, 3, 1, 10, tzinfo=UTC))
    make_usage(org_a, key_a, cost_nano=2_000, created_at=datetime(2025, 3, 2, 10, tzinfo=UTC))
    make_usage(org_a, other, cost_nano=7_000, created_at=datetime(2025, 3, 2, 11, tzinfo=UTC))
    base = f"/api/v1/orgs/{org_a.pk}"
    body = as_member_a.get(f"{base}/usage", {"group_by": "day", "key_id": key_a.pk}).json()
    assert [(r["group"], r["cost_usd"]) for r in body["rows"]] == [
        ("2025-03-01", "0.000001"),
        ("2025-03-02", "0.000002"),
    ]
    assert body["totals"]["cost_usd"] == "0.000003"
    key = as_member_a.get(f"{base}/keys/{key_a.pk}").json()
    assert key["spend_cap_usd"] == "5" and key["spend_cap_period"] == "month"
    assert as_member_a.get(f"{base}/usage", {"key_id": "x"}).status_code == 400
