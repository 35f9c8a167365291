"""Issue 16 "done when", in real Chromium: a 404, a 429 and an upstream 529 in the request log
with their messages; a request's page whose receipt sums to the billed cost; the CSV download."""

from __future__ import annotations

import csv
import io
import re
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from playwright.sync_api import expect

from tests.support.browser import App, shot

pytestmark = pytest.mark.browser


def _in_thread(fn: Any) -> Any:
    """ORM calls off Playwright's thread (its sync API runs an event loop there)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(fn).result()


def _key(app: App, rpm: int) -> str:
    from accounts import services
    from accounts.models import Organization

    def create() -> str:
        with app.blocker.unblock():
            org = Organization.objects.get(pk=app.org_id)
            new = services.create_api_key(org=org, name=f"browser-rpm-{rpm}", rpm_limit=rpm)
            return new.secret

    return str(_in_thread(create))


def _sim_url(app: App) -> str:
    from catalog.models import Deployment

    def read() -> str:
        with app.blocker.unblock():
            return str(Deployment.objects.get(name="sim").base_url).rstrip("/")

    return str(_in_thread(read))


def _wait_in_log(page: Any, app: App, request_id: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        page.goto(f"{app.url}/dashboard/requests/?request_id={request_id}")
        if page.locator(f'#request-log tbody tr[data-request-id="{request_id}"]').count():
            return
        time.sleep(0.5)
    raise AssertionError(f"{request_id} not in the request log after {timeout}s")


def test_failed_requests_receipt_and_csv(customer_page: Any, app: App) -> None:
    page = customer_page
    secret = _key(app, rpm=2)
    oai = openai.OpenAI(base_url=app.url + "/openai/v1", api_key=secret, max_retries=0)
    with pytest.raises(openai.NotFoundError) as missing:
        oai.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "x"}]
        )
    ant = anthropic.Anthropic(base_url=app.url, api_key=secret, max_retries=0)
    httpx.post(
        _sim_url(app) + "/_sim/script",
        json={"faults": [{"status": 529, "message": "browser scripted overload", "times": 1}]},
        timeout=10,
    )
    with pytest.raises(anthropic.APIStatusError) as overloaded:
        ant.messages.create(
            model="sonnet", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
    assert overloaded.value.status_code == 529
    ok = ant.messages.with_raw_response.create(
        model="sonnet", max_tokens=32, messages=[{"role": "user", "content": "hello"}]
    )
    ok.parse()
    with pytest.raises(anthropic.RateLimitError) as limited:
        ant.messages.create(
            model="sonnet", max_tokens=16, messages=[{"role": "user", "content": "x"}]
        )
    ids = {
        "404": missing.value.response.headers["x-request-id"],
        "529": overloaded.value.response.headers["x-request-id"],
        "429": limited.value.response.headers["x-request-id"],
        "ok": ok.headers["x-request-id"],
    }
    messages = {
        "404": "does not exist",
        "529": "browser scripted overload",
        "429": "requests per minute limit",
    }
    for status, text in messages.items():
        _wait_in_log(page, app, ids[status])
        row = page.locator(f'#request-log tbody tr[data-request-id="{ids[status]}"]')
        expect(row).to_contain_text(f"error {status}")
        expect(row).to_contain_text(text)
    page.goto(app.url + "/dashboard/requests/?status=error")
    expect(page.locator("#id_status")).to_have_value("error")
    for status in messages:
        expect(page.locator(f'tr[data-request-id="{ids[status]}"]')).to_be_visible()
    shot(page, "20-request-log-errors")

    # The answered request's page: its receipt's items add up to the billed cost.
    _wait_in_log(page, app, ids["ok"])
    page.goto(f"{app.url}/dashboard/requests/{ids['ok']}")
    expect(page.locator("#timeline")).to_contain_text("first token")
    items = [
        Decimal(v)
        for v in page.locator("#receipt .receipt-item td[data-usd]").evaluate_all(
            "cells => cells.map(c => c.dataset.usd)"
        )
    ]
    total_nano = int(page.locator("#receipt-total").get_attribute("data-nano"))
    assert total_nano > 0 and sum(items) * 10**9 == total_nano
    assert ok.headers["x-ezat-cost-usd"] == f"{Decimal(total_nano) / 10**9:.9f}"
    shot(page, "21-request-receipt")

    # The CSV download: the filtered log, errors only.
    page.goto(app.url + "/dashboard/requests/?status=error")
    with page.expect_download() as info:
        page.click("#requests-csv")
    path = info.value.path()
    table = list(csv.DictReader(io.StringIO(Path(path).read_text(encoding="utf-8"))))
    by_id = {r["request_id"]: r for r in table}
    assert {ids["404"], ids["529"], ids["429"]} <= set(by_id)
    assert ids["ok"] not in by_id
    assert re.search("scripted overload", by_id[ids["529"]]["error_message"])
