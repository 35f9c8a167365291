"""Usage summary, request log, balance and ledger: numbers, filters, input errors, tenancy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import ApiKey, Organization
from billing.models import UsageRecord
from tests.api.conftest import make_ledger, make_usage

pytestmark = pytest.mark.django_db

JAN_5 = datetime(2025, 1, 5, 10, 0, tzinfo=UTC)
JAN_6 = datetime(2025, 1, 6, 23, 59, tzinfo=UTC)


def url(org: Organization, endpoint: str) -> str:
    return f"/api/v1/orgs/{org.pk}/{endpoint}"


@pytest.fixture
def traffic(org_a: Organization, org_b: Organization, key_a: ApiKey, key_b: ApiKey) -> dict:
    """Three requests in org A over two days and two models; one in org B."""
    other_key = ApiKey.objects.create(
        org=org_a, name="batch", prefix="ezat_sk_zzzzzz", key_hash="h"
    )
    return {
        "a1": make_usage(
            org_a,
            key_a,
            created_at=JAN_5,
            cost_nano=1_000_000_001,
            input_tokens=1000,
            output_tokens=200,
            cache_read_tokens=50,
            cache_write_5m_tokens=5,
            cache_write_1h_tokens=7,
            reasoning_tokens=30,
            latency_ms=1200,
            ttft_ms=300,
            deployment="anthropic-eu",
            attempts=[{"deployment": "anthropic-us", "outcome": "503"}, {"outcome": "ok"}],
        ),
        "a2": make_usage(org_a, key_a, created_at=JAN_6, model_id="gpt-5", model_name="gpt-5"),
        "a3": make_usage(
            org_a,
            other_key,
            created_at=JAN_6,
            status=UsageRecord.Status.CLIENT_DISCONNECTED,
            output_exact=False,
            cost_nano=2,
        ),
        "b1": make_usage(org_b, key_b, created_at=JAN_5, cost_nano=999_999_999_999),
        "other_key": other_key,
    }


# --- Usage summary ----------------------------------------------------------------------------


def test_usage_by_day(org_a: Organization, traffic: dict, as_member_a: APIClient):
    body = as_member_a.get(url(org_a, "usage"), {"group_by": "day"}).json()
    assert body["group_by"] == "day"
    assert [(r["group"], r["requests"]) for r in body["rows"]] == [
        ("2025-01-05", 1),
        ("2025-01-06", 2),
    ]
    assert body["rows"][0]["cost_usd"] == "1.000000001"
    assert body["rows"][0]["tokens"] == {
        "input": 1000,
        "output": 200,
        "cache_read": 50,
        "cache_write_5m": 5,
        "cache_write_1h": 7,
        "reasoning": 30,
    }
    assert "key_id" not in body["rows"][0]
    assert body["totals"]["requests"] == 3
    assert body["totals"]["cost_usd"] == "1.000450003"  # org B's usage is not in it


def test_usage_defaults_to_day(org_a: Organization, traffic: dict, as_owner_a: APIClient):
    assert as_owner_a.get(url(org_a, "usage")).json()["group_by"] == "day"


def test_usage_by_model(org_a: Organization, traffic: dict, as_owner_a: APIClient):
    rows = as_owner_a.get(url(org_a, "usage"), {"group_by": "model"}).json()["rows"]
    assert [(r["group"], r["requests"], r["cost_usd"]) for r in rows] == [
        ("claude-sonnet-4", 2, "1.000000003"),
        ("gpt-5", 1, "0.00045"),
    ]


def test_usage_by_key(org_a: Organization, key_a: ApiKey, traffic: dict, as_mk_a: APIClient):
    rows = as_mk_a.get(url(org_a, "usage"), {"group_by": "key"}).json()["rows"]
    assert [(r["key_id"], r["key_name"], r["requests"]) for r in rows] == [
        (key_a.pk, "prod-a", 2),
        (traffic["other_key"].pk, "batch", 1),
    ]
    assert rows[0]["group"] == str(key_a.pk) and rows[0]["key_prefix"] == key_a.prefix


def test_usage_of_deleted_key_is_its_own_group(
    org_a: Organization, key_a: ApiKey, as_owner_a: APIClient
):
    make_usage(org_a, None, cost_nano=7)
    rows = as_owner_a.get(url(org_a, "usage"), {"group_by": "key"}).json()["rows"]
    assert [(r["group"], r["key_id"], r["cost_usd"]) for r in rows] == [(None, None, "0.000000007")]


def test_usage_date_range(org_a: Organization, traffic: dict, as_owner_a: APIClient):
    only_5th = as_owner_a.get(url(org_a, "usage"), {"until": "2025-01-05"}).json()
    assert [r["group"] for r in only_5th["rows"]] == ["2025-01-05"]  # a date `until` is inclusive
    from_6th = as_owner_a.get(url(org_a, "usage"), {"since": "2025-01-06"}).json()
    assert from_6th["totals"]["requests"] == 2
    exact = as_owner_a.get(
        url(org_a, "usage"),
        {"since": "2025-01-05T10:00:00Z", "until": "2025-01-05T10:00:00.000001+00:00"},
    ).json()
    assert exact["totals"]["requests"] == 1
    empty = as_owner_a.get(url(org_a, "usage"), {"since": "2030-01-01"}).json()
    assert empty["rows"] == [] and empty["totals"]["cost_usd"] == "0"


def test_unencoded_plus_in_offset_is_understood(
    org_a: Organization, traffic: dict, as_owner_a: APIClient
):
    # `?since=2025-01-06T00:00:00+00:00` typed into a shell arrives with a space for the plus.
    response = as_owner_a.get(url(org_a, "usage") + "?since=2025-01-06T00:00:00+00:00")
    assert response.status_code == 200
    assert response.json()["totals"]["requests"] == 2


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"group_by": "week"}, "group_by"),
        ({"since": "yesterday"}, "since"),
        ({"since": "2025-13-01"}, "since"),
        ({"until": "2025-01-32"}, "until"),
        ({"until": "2025-02-30T10:00:00Z"}, "until"),
        ({"since": "2025-01-06", "until": "2025-01-05T00:00:00Z"}, "until"),
        ({"since": "2025-01-05", "until": "2025-01-05T00:00:00Z"}, "until"),
        ({"until": "9999-12-31"}, "until"),
        ({"since": "0001-01-01T00:00:00+05:00"}, "since"),
    ],
)
def test_usage_bad_params_are_400(
    org_a: Organization, as_owner_a: APIClient, params: dict, field: str
):
    response = as_owner_a.get(url(org_a, "usage"), params)
    assert response.status_code == 400, response.content
    assert list(response.json()) == [field]


# --- Request log ------------------------------------------------------------------------------


def test_request_log_rows(
    org_a: Organization, key_a: ApiKey, traffic: dict, as_member_a: APIClient
):
    body = as_member_a.get(url(org_a, "requests")).json()
    assert body["count"] == 3
    # Newest first; org B's request is absent.
    assert [r["request_id"] for r in body["results"]] == [
        traffic["a3"].request_id,
        traffic["a2"].request_id,
        traffic["a1"].request_id,
    ]
    row = body["results"][2]
    assert row["key_prefix"] == key_a.prefix and row["key_id"] == key_a.pk
    assert row["model"] == "claude-sonnet-4" and row["model_name"] == "sonnet"
    assert row["cost_usd"] == "1.000000001"
    assert row["status"] == "ok" and row["output_exact"] is True
    assert (row["latency_ms"], row["ttft_ms"]) == (1200, 300)
    assert row["deployment"] == "anthropic-eu"
    assert row["attempts"][0] == {"deployment": "anthropic-us", "outcome": "503"}
    assert row["tokens"]["reasoning"] == 30
    assert row["time"].startswith("2025-01-05T10:00:00")
    assert body["results"][0]["output_exact"] is False


def test_request_log_filters(
    org_a: Organization, key_a: ApiKey, traffic: dict, as_owner_a: APIClient
):
    def ids(**params: Any) -> list[str]:
        response = as_owner_a.get(url(org_a, "requests"), params)
        assert response.status_code == 200, response.content
        return sorted(r["request_id"] for r in response.json()["results"])

    a1, a2, a3 = (traffic[n].request_id for n in ("a1", "a2", "a3"))
    assert ids(key=key_a.pk) == sorted([a1, a2])
    assert ids(key=key_a.prefix) == sorted([a1, a2])
    assert ids(model="gpt-5") == [a2]
    assert ids(model="sonnet") == sorted([a1, a3])  # the alias the caller sent works too
    assert ids(status="client_disconnected") == [a3]
    assert ids(request_id=a1) == [a1]
    assert ids(since="2025-01-06") == sorted([a2, a3])
    assert ids(until="2025-01-05") == [a1]
    assert ids(key=key_a.pk, model="gpt-5", status="ok") == [a2]
    # Org B's request id or key through org A's URL finds nothing.
    assert ids(request_id=traffic["b1"].request_id) == []


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "failed"}, "status"),
        ({"key": "not-a-key"}, "key"),
        ({"since": "5 Jan"}, "since"),
        ({"until": "2025-01-05T25:00:00"}, "until"),
    ],
)
def test_request_log_bad_params_are_400(
    org_a: Organization, as_owner_a: APIClient, params: dict, field: str
):
    response = as_owner_a.get(url(org_a, "requests"), params)
    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_request_log_refuses_a_full_secret(org_a: Organization, as_owner_a: APIClient):
    from accounts import services

    secret = services.create_api_key(org=org_a).secret
    response = as_owner_a.get(url(org_a, "requests"), {"key": secret})
    assert response.status_code == 400
    assert "never its secret" in response.json()["key"][0]


def test_request_log_pagination(org_a: Organization, key_a: ApiKey, as_owner_a: APIClient):
    for _ in range(5):
        make_usage(org_a, key_a)
    first = as_owner_a.get(url(org_a, "requests"), {"page_size": 2}).json()
    assert first["count"] == 5 and len(first["results"]) == 2
    seen = [
        r["request_id"]
        for page in (1, 2, 3)
        for r in as_owner_a.get(url(org_a, "requests"), {"page_size": 2, "page": page}).json()[
            "results"
        ]
    ]
    assert len(set(seen)) == 5


# --- Balance ----------------------------------------------------------------------------------


def test_balance(org_a: Organization, org_b: Organization, key_a: ApiKey, as_member_a: APIClient):
    make_ledger(org_a, 20_000_000_000)
    make_ledger(org_a, -1_000_000_000, kind="usage")
    make_ledger(org_b, 99_000_000_000)
    reconciled = make_ledger(org_a, 0, kind="adjustment")
    # Last month's usage, already reconciled: not in this month's spend nor in the balance twice.
    make_usage(
        org_a,
        key_a,
        created_at=timezone.now() - timedelta(days=40),
        cost_nano=5,
        ledger_entry=reconciled,
    )
    make_usage(org_a, key_a, cost_nano=250_000_000)  # this month, not yet reconciled
    make_usage(org_b, None, cost_nano=123)

    body = as_member_a.get(url(org_a, "balance")).json()
    assert body["ledger_balance_usd"] == "19"
    assert body["unreconciled_usage_usd"] == "0.25"
    assert body["balance_usd"] == "18.75"
    assert body["month_to_date_spend_usd"] == "0.25"
    assert body["month_start"].endswith("T00:00:00Z")


def test_balance_can_be_negative(org_a: Organization, key_a: ApiKey, as_owner_a: APIClient):
    make_usage(org_a, key_a, cost_nano=1)
    assert as_owner_a.get(url(org_a, "balance")).json()["balance_usd"] == "-0.000000001"


# --- Ledger -----------------------------------------------------------------------------------


def test_ledger(org_a: Organization, org_b: Organization, as_mk_a: APIClient):
    credit = make_ledger(org_a, 20_000_000_000, memo="welcome")
    debit = make_ledger(org_a, -1_500_000_000, kind="usage")
    make_ledger(org_b, 5)
    body = as_mk_a.get(url(org_a, "ledger")).json()
    assert body["count"] == 2
    assert [(e["id"], e["kind"], e["amount_usd"]) for e in body["results"]] == [
        (debit.pk, "usage", "-1.5"),
        (credit.pk, "credit", "20"),
    ]
    assert body["results"][1]["memo"] == "welcome"
    credits = as_mk_a.get(url(org_a, "ledger"), {"kind": "credit"}).json()["results"]
    assert [e["id"] for e in credits] == [credit.pk]
    future = as_mk_a.get(url(org_a, "ledger"), {"since": "2999-01-01"}).json()
    assert future["count"] == 0
    bad = as_mk_a.get(url(org_a, "ledger"), {"kind": "refund"})
    assert bad.status_code == 400 and list(bad.json()) == ["kind"]


def test_ledger_pagination(org_a: Organization, as_owner_a: APIClient):
    for _ in range(3):
        make_ledger(org_a, 1)
    body = as_owner_a.get(url(org_a, "ledger"), {"page_size": 2, "page": 2}).json()
    assert body["count"] == 3 and len(body["results"]) == 1 and body["previous"]


# --- Tenancy and methods ----------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["usage", "requests", "balance", "ledger"])
def test_other_orgs_money_is_404(
    org_a: Organization,
    org_b: Organization,
    traffic: dict,
    endpoint: str,
    as_owner_a: APIClient,
    as_member_a: APIClient,
    as_owner_b: APIClient,
):
    assert as_owner_a.get(url(org_b, endpoint)).status_code == 404
    assert as_member_a.get(url(org_b, endpoint)).status_code == 404
    assert as_owner_b.get(url(org_a, endpoint)).status_code == 404
    assert as_owner_b.get(url(org_b, endpoint)).status_code == 200


@pytest.mark.parametrize("endpoint", ["usage", "requests", "balance", "ledger"])
def test_money_endpoints_are_read_only(org_a: Organization, as_owner_a: APIClient, endpoint: str):
    assert as_owner_a.post(url(org_a, endpoint), {}, format="json").status_code == 405
    assert as_owner_a.delete(url(org_a, endpoint)).status_code == 405


def test_request_log_itemises_the_cost_at_the_tier_applied(
    org_a: Organization, key_a: ApiKey, usage: Any, as_owner_a: APIClient
):
    """A Claude Haiku 5.5 request above 100,000 prompt tokens, as the gateway records it."""
    tier = {
        "upToPromptTokens": None,
        "input": "0.5",
        "output": "2.5",
        "cacheRead": "0.05",
        "cacheWrite5m": "0.625",
        "cacheWrite1h": "1",
    }
    record = usage(
        org_a,
        key_a,
        input_tokens=90_000,
        output_tokens=1_001,
        cache_read_tokens=20_000,
        cache_write_5m_tokens=3,
        # (45,000,000,000 + 2,502,500,000 + 1,000,000,000 + 1,875,000) pico-USD / 1000
        cost_nano=48_504_375,
        prices=tier,
        price_version=42,
    )
    row = as_owner_a.get(url(org_a, "requests")).json()["results"][0]
    assert row["request_id"] == record.request_id
    cost = row["cost"]
    assert (cost["price_version"], cost["up_to_prompt_tokens"]) == (42, None)
    assert cost["prompt_tokens"] == 110_003
    assert cost["items"] == [
        {"kind": "input", "tokens": 90_000, "usd_per_mtok": "0.5", "usd": "0.045"},
        {"kind": "output", "tokens": 1_001, "usd_per_mtok": "2.5", "usd": "0.0025025"},
        {"kind": "cacheRead", "tokens": 20_000, "usd_per_mtok": "0.05", "usd": "0.001"},
        {"kind": "cacheWrite5m", "tokens": 3, "usd_per_mtok": "0.625", "usd": "0.000001875"},
        {"kind": "cacheWrite1h", "tokens": 0, "usd_per_mtok": "1", "usd": "0"},
    ]
    assert cost["total_usd"] == row["cost_usd"] == "0.048504375"
