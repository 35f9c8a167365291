"""Issue 34 item 3: one money rule (core/money.py) on every surface.

The same $0.00093 once read $0.000930 in the log, $0.000930000 on the detail page and $0.0009300
in the admin; a $5 cap read "$5.0000000 / month" beside a $0.0001 cap; receipt lines had no "$";
a ledger entry read "$-0.003193000". Each test below renders a real surface and reads the text.
"""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from accounts import services
from billing.models import LedgerEntry, RequestLog, UsageRecord
from core import money
from tests.dashboard.conftest import World, make_usage

USD = 1_000_000_000
COST = 930_000  # $0.00093


def _html(response) -> str:  # type: ignore[no-untyped-def]
    assert response.status_code == 200, response.status_code
    return response.content.decode()


@pytest.mark.parametrize(
    ("nano", "period", "text"),
    [
        (5 * USD, "month", "$5 / month"),
        (100_000, "day", "$0.0001 / day"),
        (2_500_000_000, "month", "$2.50 / month"),
        (1_234 * USD, "total", "$1,234 / total"),
        (None, "month", "none"),
    ],
)
def test_cap_reads_as_set(nano: int | None, period: str, text: str) -> None:
    assert money.usd_cap(nano, period) == text


def test_per_request_rule_for_machines_and_receipt_lines() -> None:
    assert money.usd_cost(COST) == "$0.000930"
    assert money.usd_cost(-3_193_000) == "−$0.003193"
    assert money.cost_number(COST) == "0.000930"
    assert money.cost_number(-3_193_000) == "-0.003193"
    assert money.cost_number(-1) == "0.000000"  # rounds to zero: no "-0.000000"
    assert money.usd_cost_pico(6_900_000_000) == "$0.006900"  # 2300 tokens × $3/M


@pytest.fixture
def priced(world: World) -> UsageRecord:
    record = make_usage(world.a.org, world.a.key, "req_acme_rule_1", cost_nano=COST)
    entry = LedgerEntry.objects.create(
        org=world.a.org, kind="usage", amount_nano=-3_193_000, reference="usage-batch:rule"
    )
    UsageRecord.objects.filter(pk=record.pk).update(ledger_entry=entry)
    RequestLog.objects.filter(request_id=record.request_id).update(hold_nano=9_000_000)
    return record


def test_one_cost_reads_the_same_on_every_page(world: World, priced: UsageRecord) -> None:
    client = world.client(world.a.owner)
    log = _html(client.get(reverse("dashboard:requests") + "?request_id=req_acme_rule_1"))
    assert '<td class="num mono col-cost">$0.000930</td>' in log
    detail = _html(client.get(f"/dashboard/requests/{priced.request_id}"))
    assert 'data-nano="930000">$0.000930<' in detail
    assert "$0.000930000" not in detail
    assert "(−$0.003193," in detail and "$-0" not in detail
    # Receipt lines carry a "$" and the per-request rule (1000 × $3/M = $0.003).
    assert re.search(r'data-usd="0\.003">\$0\.003000<', detail), detail
    operator = get_user_model().objects.create_superuser("root", password="pw-for-tests-only")
    admin = Client()
    admin.force_login(operator)
    listing = _html(admin.get("/admin/billing/usagerecord/?q=req_acme_rule_1"))
    assert "$0.000930" in listing and "$0.0009300" not in listing
    logs = _html(admin.get("/admin/billing/requestlog/?q=req_acme_rule_1"))
    assert "$0.000930" in logs and "$0.0009300" not in logs
    change = _html(admin.get(f"/admin/billing/usagerecord/{priced.pk}/change/"))
    assert "$0.000930" in change and "0.00093 USD" not in change


def test_caps_read_as_set_side_by_side(world: World) -> None:
    org, owner = world.a.org, world.a.owner
    services.create_api_key(org=org, name="five", created_by=owner, spend_cap_nano=5 * USD)
    services.create_api_key(
        org=org, name="tiny", created_by=owner, spend_cap_nano=100_000, spend_cap_period="day"
    )
    html = _html(world.client(owner).get(reverse("dashboard:keys")))
    caps = re.findall(r'data-testid="cap">([^<]+)<', html)
    assert "$5 / month" in caps and "$0.0001 / day" in caps, caps
    assert "5.0000000" not in html
    operator = get_user_model().objects.create_superuser("root", password="pw-for-tests-only")
    admin = Client()
    admin.force_login(operator)
    listing = _html(admin.get(reverse("admin:accounts_apikey_changelist")))
    assert "$5 / month" in listing and "$0.0001 / day" in listing


def test_csv_cost_follows_the_rule_and_keeps_nano(world: World, priced: UsageRecord) -> None:
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(world.a.owner)
    response = client.get(
        f"/api/v1/orgs/{world.a.org.pk}/requests.csv", {"request_id": priced.request_id}
    )
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    row = next(r for r in rows if r["request_id"] == priced.request_id)
    assert row["cost_usd"] == "0.000930" and row["cost_nano"] == str(COST)


def test_playground_shows_the_logs_text(world: World, priced: UsageRecord) -> None:
    from playground.relay import _usage_row

    usage = _usage_row(world.a.org.pk, priced.request_id)
    assert usage is not None and usage["cost"] == "$0.000930"
