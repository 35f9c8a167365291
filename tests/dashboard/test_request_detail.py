"""Issue 16 item 3: failed requests in the dashboard's request log (status filter, id search by
full id or 8+ character prefix, error message shown) and the per-request page (timeline, tokens,
itemised receipt summing to the billed cost, hold, ledger entry), in the dashboard and the admin;
another org's request id is a 404."""

from __future__ import annotations

import re
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from billing.models import LedgerEntry, RequestLog, UsageRecord
from tests.dashboard.conftest import World


def _html(response) -> str:  # type: ignore[no-untyped-def]
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def _failed(world: World, request_id: str = "req_acme_overload_1") -> RequestLog:
    return RequestLog.objects.create(
        request_id=request_id,
        org=world.a.org,
        api_key=world.a.key,
        api="messages",
        model_name="sonnet",
        model_id="anthropic/claude-sonnet-5-5",
        status="error",
        http_status=529,
        error_type="overloaded_error",
        error_message="scripted overload <b>not html</b>",
        attempts=[{"deployment": "sim", "outcome": "http_529", "status": 529, "ttfb_ms": 4.2}],
        hold_nano=5_000_000,
        admitted_ms=1,
        latency_ms=40,
        started_at=timezone.now(),
        created_at=timezone.now(),
    )


def test_request_log_lists_errors_and_filters_on_them(world: World) -> None:
    _failed(world)
    client = world.client(world.member_a)
    url = reverse("dashboard:requests")
    html = _html(client.get(url + "?status=error"))
    assert '<option value="error" selected>' in html
    assert "req_acme_overload_1" in html and "error 529" in html
    assert "scripted overload &lt;b&gt;not html&lt;/b&gt;" in html
    assert "req_acme_0001" not in html  # an ok request
    # Request-id search finds a failed request by its full id or a prefix of 8+ characters.
    assert "req_acme_overload_1" in _html(client.get(url + "?request_id=req_acme_overload_1"))
    assert "req_acme_overload_1" in _html(client.get(url + "?request_id=req_acme_ov"))


def test_detail_page_of_a_billed_request(world: World) -> None:
    record = UsageRecord.objects.get(request_id=world.a.request_id)
    entry = LedgerEntry.objects.create(
        org=world.a.org, kind="usage", amount_nano=-record.cost_nano, reference="usage-batch:77"
    )
    UsageRecord.objects.filter(pk=record.pk).update(ledger_entry=entry)
    RequestLog.objects.filter(request_id=record.request_id).update(
        hold_nano=9_000_000, admitted_ms=2, ttft_ms=120, finish_reason="end_turn"
    )
    html = _html(world.client(world.member_a).get(f"/dashboard/requests/{record.request_id}"))
    for step in ("received", "admitted", "attempt 1", "first token", "last token", "recorded"):
        assert f"<td>{step}</td>" in html, step
    assert "<td>reconciled</td>" in html and "usage-batch:77" in html
    assert "end_turn" in html and "120 ms" in html
    # Receipt: each token class × its price = its cost, and the items sum to the billed cost.
    items = [Decimal(v) for v in re.findall(r'data-usd="([0-9.]+)"', html)]
    total = re.search(r'id="receipt-total" data-nano="(\d+)"', html)
    assert total is not None and int(total.group(1)) == record.cost_nano
    assert sum(items) * 10**9 == record.cost_nano  # 1000 × $3/M + 200 × $15/M = $0.006
    # Per-request amounts follow the one rule (issue 34): 6 decimals, the minus before the "$".
    assert "$0.009000" in html and "$0.003000" in html  # hold taken, and released
    assert "$0.009000000" not in html
    assert "(−$0.006000," in html  # the ledger entry, not "$-0.006000000"


def test_detail_page_of_a_failed_request(world: World) -> None:
    row = _failed(world)
    html = _html(world.client(world.a.owner).get(f"/dashboard/requests/{row.request_id}/"))
    assert "overloaded_error" in html and "scripted overload &lt;b&gt;" in html
    assert "sim: http_529 (HTTP 529), headers after 4.2 ms" in html
    assert 'id="receipt-unbilled"' in html


def test_another_orgs_request_page_is_404(world: World) -> None:
    row = _failed(world)
    carol = world.client(world.b.owner)
    assert carol.get(f"/dashboard/requests/{row.request_id}").status_code == 404
    assert carol.get(f"/dashboard/requests/{world.a.request_id}").status_code == 404
    assert carol.get(f"/dashboard/requests/{world.b.request_id}").status_code == 200


def test_admin_shows_the_same_page(world: World) -> None:
    row = _failed(world)
    admin = get_user_model().objects.create_superuser("root", password="pw-for-tests-only")
    client = Client()
    client.force_login(admin)
    listing = _html(client.get("/admin/billing/requestlog/?status__exact=error"))
    assert "req_acme_overload_1" in listing
    html = _html(client.get(f"/admin/billing/requestlog/{row.pk}/change/"))
    assert "<td>received</td>" in html and "scripted overload" in html
