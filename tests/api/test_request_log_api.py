"""Issue 16 item 2: the request log in the management API: status=error and http_status filters,
the new fields, one request with its receipt, the streamed CSV export, 400s naming the
parameter, tenancy (another org's request id is a 404)."""

from __future__ import annotations

import csv
import io
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts.models import ApiKey, Organization
from billing.models import LedgerEntry, RequestLog, UsageRecord
from tests.api.conftest import make_usage

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def url(org: Organization, endpoint: str) -> str:
    return f"/api/v1/orgs/{org.pk}/{endpoint}"


def error_row(org: Organization, key: ApiKey | None, request_id: str, **fields: Any) -> RequestLog:
    values: dict[str, Any] = {
        "request_id": request_id,
        "org": org,
        "api_key": key,
        "api": "chat",
        "model_name": "no-such-model",
        "status": "error",
        "http_status": 404,
        "error_type": "not_found_error",
        "error_message": "The model `no-such-model` does not exist",
        "started_at": NOW,
        "created_at": NOW,
        **fields,
    }
    return RequestLog.objects.create(**values)


@pytest.fixture
def log(org_a: Organization, org_b: Organization, key_a: ApiKey, key_b: ApiKey) -> dict:
    ok = make_usage(org_a, key_a, created_at=NOW - timedelta(minutes=5), request_id="req_ok_1")
    return {
        "ok": ok,
        "404": error_row(org_a, key_a, "req_missing_1"),
        "429": error_row(
            org_a,
            key_a,
            "req_limited_1",
            http_status=429,
            error_type="rate_limit_error",
            error_message="requests per minute limit of this key exceeded",
            count=7,
            created_at=NOW + timedelta(seconds=1),
        ),
        "529": error_row(
            org_a,
            key_a,
            "req_overload_1",
            api="messages",
            model_name="sonnet",
            model_id="anthropic/claude-sonnet-5-5",
            http_status=529,
            error_type="overloaded_error",
            error_message="scripted overload",
            attempts=[{"deployment": "sim", "outcome": "http_529", "status": 529, "ttfb_ms": 3}],
            created_at=NOW + timedelta(seconds=2),
        ),
        "b": error_row(org_b, key_b, "req_other_org_1"),
    }


def ids(client: APIClient, org: Organization, **params: Any) -> list[str]:
    response = client.get(url(org, "requests"), params)
    assert response.status_code == 200, response.content
    return [r["request_id"] for r in response.json()["results"]]


def test_errors_listed_with_what_the_client_saw(
    org_a: Organization, log: dict, as_member_a: APIClient
) -> None:
    body = as_member_a.get(url(org_a, "requests")).json()
    assert [r["request_id"] for r in body["results"]] == [
        "req_overload_1",
        "req_limited_1",
        "req_missing_1",
        "req_ok_1",
    ]
    overload = body["results"][0]
    assert (overload["status"], overload["http_status"]) == ("error", 529)
    assert overload["error_type"] == "overloaded_error"
    assert overload["error_message"] == "scripted overload"
    assert overload["cost_usd"] == "0" and overload["cost"] is None
    assert overload["attempts"][0]["outcome"] == "http_529"
    assert body["results"][1]["count"] == 7
    ok = body["results"][3]
    assert ok["status"] == "ok" and ok["http_status"] == 200
    assert ok["cost"]["total_usd"] == ok["cost_usd"]


def test_status_and_http_status_filters(
    org_a: Organization, log: dict, as_owner_a: APIClient
) -> None:
    assert ids(as_owner_a, org_a, status="error") == [
        "req_overload_1",
        "req_limited_1",
        "req_missing_1",
    ]
    assert ids(as_owner_a, org_a, status="ok") == ["req_ok_1"]
    assert ids(as_owner_a, org_a, http_status=429) == ["req_limited_1"]
    assert ids(as_owner_a, org_a, status="error", http_status=404) == ["req_missing_1"]
    # Full id or a prefix of 8+ characters, failed requests included.
    assert ids(as_owner_a, org_a, request_id="req_overload_1") == ["req_overload_1"]
    assert ids(as_owner_a, org_a, request_id="req_over") == ["req_overload_1"]
    assert ids(as_owner_a, org_a, request_id="req_ove") == []
    # The model filter matches the canonical model: an alias finds requests sent by id.
    assert "req_overload_1" in ids(as_owner_a, org_a, model="anthropic/claude-sonnet-5-5")


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "failed"}, "status"),
        ({"http_status": "abc"}, "http_status"),
        ({"http_status": "1000"}, "http_status"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-13-40"}, "until"),
        ({"page_size": "201"}, "page_size"),
    ],
)
def test_bad_filters_are_400_naming_the_parameter(
    org_a: Organization, as_owner_a: APIClient, params: dict, field: str
) -> None:
    for endpoint in ("requests", "requests.csv"):
        if endpoint == "requests.csv" and field == "page_size":
            continue
        response = as_owner_a.get(url(org_a, endpoint), params)
        assert response.status_code == 400, (endpoint, response.content)
        assert field in response.json()


def test_one_request_with_its_receipt(
    org_a: Organization, key_a: ApiKey, log: dict, as_member_a: APIClient
) -> None:
    ok: UsageRecord = log["ok"]
    entry = LedgerEntry.objects.create(
        org=org_a, kind="usage", amount_nano=-ok.cost_nano, reference=f"usage:{ok.pk}"
    )
    UsageRecord.objects.filter(pk=ok.pk).update(ledger_entry=entry)
    RequestLog.objects.filter(request_id=ok.request_id).update(
        hold_nano=ok.cost_nano * 3, admitted_ms=2, ttft_ms=300, latency_ms=1300, output_tokens=10
    )
    body = as_member_a.get(url(org_a, f"requests/{ok.request_id}")).json()
    receipt = body["receipt"]
    assert receipt["billed"] is True
    assert receipt["cost_usd"] == body["cost_usd"] == receipt["cost"]["total_usd"]
    assert receipt["hold_usd"] == "0.00135" and receipt["released_usd"] == "0.0009"
    assert receipt["ledger_entry"]["reference"] == f"usage:{ok.pk}"
    steps = [s["step"] for s in body["timeline"]]
    assert steps[:2] == ["received", "admitted"]
    assert {"first token", "last token", "recorded", "reconciled"} <= set(steps)
    assert body["output_tokens_per_second"] == 10.0

    failed = as_member_a.get(url(org_a, "requests/req_overload_1")).json()
    assert failed["receipt"]["billed"] is False and failed["receipt"]["cost"] is None
    assert failed["error_message"] == "scripted overload"
    assert any("sim: http_529" in s["detail"] for s in failed["timeline"])


def test_another_orgs_request_is_404(org_a: Organization, log: dict, as_owner_a: APIClient):
    assert as_owner_a.get(url(org_a, "requests/req_other_org_1")).status_code == 404
    assert as_owner_a.get(url(org_a, "requests/req_nothing_here")).status_code == 404
    assert "req_other_org_1" not in ids(as_owner_a, org_a, request_id="req_other_org_1")


def test_csv_export_is_the_filtered_log(
    org_a: Organization, log: dict, as_member_a: APIClient
) -> None:
    response = as_member_a.get(url(org_a, "requests.csv"), {"status": "error"})
    assert response.status_code == 200
    assert response["content-type"].startswith("text/csv")
    assert "attachment" in response["content-disposition"]
    text = b"".join(response.streaming_content).decode()
    table = list(csv.DictReader(io.StringIO(text)))
    assert [r["request_id"] for r in table] == ["req_overload_1", "req_limited_1", "req_missing_1"]
    assert table[0]["error_message"] == "scripted overload"
    assert table[0]["http_status"] == "529" and table[1]["count"] == "7"
    assert "req_other_org_1" not in text


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def _bulk_row(org: Organization, key: ApiKey, n: int) -> RequestLog:
    """Row n of the 100,000: every fifth a 429, its own id, tokens and second."""
    return RequestLog(
        request_id=f"req_bulk_{n:06d}",
        org=org,
        api_key=key,
        api="chat",
        model_name="sonnet",
        model_id="anthropic/claude-sonnet-5-5",
        status="error" if n % 5 == 0 else "ok",
        http_status=429 if n % 5 == 0 else 200,
        error_message="requests per minute limit of this key exceeded" if n % 5 == 0 else "",
        input_tokens=1000 + n,
        output_tokens=200,
        cost_nano=6_000_000,
        attempts=[{"deployment": "sim", "outcome": "ok", "status": 200, "ttfb_ms": 12.5}],
        started_at=NOW - timedelta(seconds=n),
        created_at=NOW - timedelta(seconds=n),
    )


def _insert_bulk_rows(org: Organization, key: ApiKey, total: int) -> None:
    """The rows of _bulk_row for n < total. On PostgreSQL the ORM writes the first five (one of
    each kind) and one INSERT ... SELECT over generate_series copies them to the rest, with each
    row's own id, tokens and time: the same table as 100,000 ORM objects (checked below), in a
    second instead of the half minute building and sending those took."""
    from django.db import connection

    if connection.vendor != "postgresql":
        RequestLog.objects.bulk_create(
            (_bulk_row(org, key, n) for n in range(total)), batch_size=5000
        )
        return
    RequestLog.objects.bulk_create([_bulk_row(org, key, n) for n in range(5)])
    varying = {
        "request_id": "'req_bulk_' || lpad(g.n::text, 6, '0')",
        "input_tokens": "1000 + g.n",
        "started_at": "%(now)s - make_interval(secs => g.n)",
        "created_at": "%(now)s - make_interval(secs => g.n)",
    }
    fields = [f for f in RequestLog._meta.concrete_fields if not f.primary_key]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    values = ", ".join(
        varying.get(f.name, f"t.{connection.ops.quote_name(f.column)}") for f in fields
    )
    table = connection.ops.quote_name(RequestLog._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({columns}) SELECT {values} "
            "FROM generate_series(5, %(last)s) AS g(n) JOIN "
            f"{table} t ON t.org_id = %(org)s "
            "AND t.request_id = 'req_bulk_' || lpad((g.n %% 5)::text, 6, '0')",
            {"now": NOW, "last": total - 1, "org": org.pk},
        )


def test_csv_export_of_100000_rows_streams_with_flat_memory(
    org_a: Organization, key_a: ApiKey, as_member_a: APIClient
) -> None:
    total = 100_000
    _insert_bulk_rows(org_a, key_a, total)
    assert RequestLog.objects.filter(org=org_a).count() == total
    for n in (0, 1, 7, 99_995, total - 1):  # copies are the rows the ORM would have written
        row = RequestLog.objects.get(org=org_a, request_id=f"req_bulk_{n:06d}")
        expected = _bulk_row(org_a, key_a, n)
        for field in ("status", "http_status", "error_message", "input_tokens", "attempts",
                      "cost_nano", "created_at", "started_at", "api_key_id", "model_id"):  # fmt: skip
            assert getattr(row, field) == getattr(expected, field), (n, field)
    started = time.monotonic()
    response = as_member_a.get(url(org_a, "requests.csv"))
    assert response.status_code == 200 and response.streaming
    chunks = iter(response.streaming_content)
    lines = next(chunks).count(b"\n") + next(chunks).count(b"\n")
    baseline = _rss_bytes()  # after the first page: the steady state of one page in memory
    peak = baseline
    for chunk in chunks:
        lines += chunk.count(b"\n")
        peak = max(peak, _rss_bytes())
    elapsed = time.monotonic() - started
    assert lines == total + 1  # header + every row
    # Flat: the whole export is ~20 MB of CSV; holding it (or its rows) would add far more.
    assert peak - baseline < 15 * 1024 * 1024, (baseline, peak)
    assert elapsed < 300  # bounded (a loaded 2-core box; typically a few seconds)
