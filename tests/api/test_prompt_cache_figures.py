"""Issue 34: prompt-cache figures per model and per key, in /api/v1 and on the usage page:
cache-read tokens, hit rate (cache read ÷ all input) and the money the cache saved."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from accounts import services
from accounts.models import ApiKey, Organization
from tests.api.conftest import make_usage

pytestmark = pytest.mark.django_db


@pytest.fixture
def usage(org_a: Organization, key_a: ApiKey, org_b: Organization) -> ApiKey:
    other = services.create_api_key(org=org_a, name="batch").key
    # 100 uncached + 900 read (at $3 vs $0.3 per M: 900 × 2.7 × 1000 = 2,430,000 nano saved)
    make_usage(org_a, key_a, input_tokens=100, cache_read_tokens=900)
    make_usage(org_a, other, model_id="claude-opus-4", input_tokens=500, cache_write_5m_tokens=500)
    make_usage(org_b, None, input_tokens=1, cache_read_tokens=10**6)  # another org's
    return other


def test_api_per_model_and_per_key(
    org_a: Organization, as_member_a: APIClient, usage: ApiKey
) -> None:
    url = f"/api/v1/orgs/{org_a.pk}/usage/cache"
    by_model = as_member_a.get(url)
    assert by_model.status_code == 200, by_model.content
    body = by_model.json()
    assert body["group_by"] == "model"
    sonnet, opus = body["rows"]
    assert (sonnet["group"], sonnet["cache_read_tokens"], sonnet["input_tokens"]) == (
        "claude-sonnet-4",
        900,
        1000,
    )
    assert Decimal(sonnet["hit_rate"]) == Decimal("0.9") and sonnet["saved_usd"] == "0.00243"
    assert opus["cache_read_tokens"] == 0 and Decimal(opus["hit_rate"]) == 0
    assert body["total"]["input_tokens"] == 2000 and Decimal(body["total"]["hit_rate"]) == Decimal(
        "0.45"
    )
    by_key = as_member_a.get(url, {"group_by": "key"}).json()
    assert [r["label"] for r in by_key["rows"]][1] == f"batch ({usage.prefix}…)"
    assert as_member_a.get(url, {"group_by": "day"}).status_code == 400


def test_usage_page_shows_both_tables(org_a: Organization, owner_a: object, usage: ApiKey) -> None:
    client = Client()
    client.force_login(owner_a)  # type: ignore[arg-type]
    html = client.get(reverse("dashboard:usage") + "?days=7").content.decode()
    for group in ("model", "key"):
        table = html[html.index(f'id="cache-by-{group}"') :]
        table = table[: table.index("</table>")]
        assert 'data-testid="cache-read">900<' in table
        assert 'data-testid="hit-rate">90.0 %<' in table
        assert 'data-testid="saved">$0.002430<' in table
    assert "1000000" not in html and "1,000,000" not in html  # org B's usage is not in it
