"""The Playground streaming an answer through the real gateway and showing the exact cost
billed, and a low-balance alert set in the dashboard reaching a local webhook receiver with a
valid signature, exactly once. Real Chromium, the running server, the simulator upstream."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pytest
from playwright.sync_api import expect

from alerts import signing
from tests.alerts.receiver import webhook_receiver
from tests.support.browser import App, shot
from tests.waiting import wait_for

pytestmark = pytest.mark.browser


def _in_db_thread(app: App, func: Any) -> Any:
    """ORM reads from another thread: Playwright's loop runs in this one."""

    def run() -> Any:
        from django.db import connection

        try:
            with app.blocker.unblock():
                return func()
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


def test_playground_streams_an_answer_and_shows_its_cost(
    own_customer_page: Any, own_app: App
) -> None:
    page, app = own_customer_page, own_app
    page.goto(app.url + "/dashboard/playground/")
    html = page.content()
    assert "ezat_sk_" not in html, "no key material in the page"
    page.select_option("#pg-model", "anthropic/claude-sonnet-5-5")
    page.select_option("#pg-reasoning", "high")
    page.fill("#pg-system", "You are terse.")
    page.fill("#pg-prompt", "Say hello to the Playground.")
    # The code samples follow the form.
    expect(page.locator("#pg-code")).to_have_value(re.compile(r"/openai/v1/responses"))
    page.click("#pg-tabs [data-snippet=openai]")
    expect(page.locator("#pg-code")).to_have_value(re.compile(r"from openai import OpenAI"))
    page.click("#pg-tabs [data-snippet=anthropic]")
    expect(page.locator("#pg-code")).to_have_value(re.compile(r"import anthropic"))
    page.click("#pg-tabs [data-snippet=ts]")
    expect(page.locator("#pg-code")).to_have_value(re.compile(r'import OpenAI from "openai"'))

    page.click("#pg-run")
    expect(page.get_by_test_id("pg-cost")).to_have_text(re.compile(r"^\$\d+\.\d+$"))
    answer = page.get_by_test_id("pg-answer").inner_text()
    assert answer.strip()
    # The model shared its thinking (a reasoning summary): shown above the answer.
    expect(page.locator("#pg-thinking-box")).to_be_visible()
    assert page.locator("#pg-thinking").text_content().strip()
    expect(page.locator("#pg-ttft")).to_have_text(re.compile(r"^\d+\.\d\d s$"))
    request_id = page.locator("#pg-detail").inner_text()
    shown_cost = page.get_by_test_id("pg-cost").inner_text()
    shot(page, "20-playground")

    def record() -> tuple[int, str, str, int]:
        from billing.models import UsageRecord

        r = UsageRecord.objects.select_related("api_key").get(request_id=request_id)
        return r.org_id, r.api_key.name, r.model_id, r.cost_nano

    org_id, key_name, model_id, cost_nano = _in_db_thread(app, record)
    assert org_id == app.org_id  # billed to the org, like any request
    assert key_name.startswith("Playground · ")
    assert model_id == "anthropic/claude-sonnet-5-5"
    assert cost_nano > 0
    from core import money

    # The cost billed, by the one rule of per-request costs (issue 34: as the request log).
    assert shown_cost == money.usd_cost(cost_nano)

    # In the request log, marked as from the Playground, and its detail page opens. The log row
    # is written by the usage writer's group commit after the bill (billing/request_log.py):
    # wait for it, not for the page's first load.
    def logged() -> bool:
        from billing.models import RequestLog

        return RequestLog.objects.filter(request_id=request_id).exists()

    wait_for(lambda: _in_db_thread(app, logged), what=f"the request-log row of {request_id}")
    page.goto(app.url + "/dashboard/requests/")
    row = page.locator(f'#request-log tbody tr[data-request-id="{request_id}"]')
    expect(row.get_by_test_id("playground-badge")).to_be_visible()
    page.goto(app.url + f"/dashboard/requests/{request_id}")
    expect(page.locator("body")).to_contain_text(request_id)


def test_playground_shows_the_gateways_validation_error_inline(
    own_customer_page: Any, own_app: App
) -> None:
    page, app = own_customer_page, own_app
    page.goto(app.url + "/dashboard/playground/")
    # A model the gateway does not know (the page only offers known ones, so add one): the
    # gateway's own refusal shows inline, with its status. (An empty prompt is refused by the
    # page itself: tests/dashboard/test_dashboard_v3_browser.py.)
    page.evaluate(
        "() => { const o = new Option('no/such-model', 'no/such-model');"
        " document.getElementById('pg-model').add(o); o.selected = true; }"
    )
    page.fill("#pg-prompt", "hello")
    page.click("#pg-run")
    error = page.locator("#pg-error")
    expect(error).to_be_visible()
    expect(error).to_contain_text("HTTP 404")


def test_playground_run_refuses_a_cross_site_post(browser: Any, own_app: App) -> None:
    """CSRF: without the page's token the relay refuses (and mints no key)."""
    from tests.support.browser import new_page, sign_in

    page = new_page(browser)
    try:
        sign_in(page, own_app, own_app.customer)
        response = page.request.post(
            own_app.url + "/dashboard/playground/run",
            data=orjson.dumps({"model": "sonnet", "prompt": "hi"}),
            headers={"Content-Type": "application/json"},
        )
        assert response.status == 403
    finally:
        page.context.close()


def test_low_balance_alert_reaches_a_local_webhook_once(
    own_customer_page: Any, own_app: App
) -> None:
    page, app = own_customer_page, own_app
    with webhook_receiver() as receiver:
        page.goto(app.url + "/dashboard/alerts/")
        # Bad input first: nothing is saved, the message says why.
        page.fill("#id_webhook_url", "http://10.0.0.8/hook")
        page.click("button:has-text('Save alerts')")
        expect(page.locator(".field .error")).to_contain_text("not public")
        page.fill("#id_webhook_url", receiver.url)
        page.fill("#id_low_balance_usd", "-3")
        page.click("button:has-text('Save alerts')")
        expect(page.locator(".field .error")).to_contain_text("cannot be negative")
        assert receiver.count() == 0

        page.fill("#id_low_balance_usd", "1000")  # the org has $10: below at once
        page.click("button:has-text('Save alerts')")
        expect(page.locator(".messages")).to_contain_text("Alert settings saved")
        wait_for(lambda: receiver.count() >= 1, what="the webhook")
        secret = page.locator("#webhook-secret").input_value()
        got = receiver.requests[0]
        assert signing.verify(
            secret,
            got.body,
            got.headers[signing.TIMESTAMP_HEADER],
            got.headers[signing.SIGNATURE_HEADER],
            now=time.time(),
        )
        assert orjson.loads(got.body)["type"] == "low_balance"
        page.reload()
        history = page.locator("#alert-history tbody tr")
        expect(history).to_have_count(1)
        expect(history.first).to_contain_text("below $1,000.00")
        expect(history.first).to_contain_text("Sent")
        shot(page, "21-alerts")

        # Saving again re-evaluates (in-process here, before the redirect answers): still
        # below, the same crossing, so nothing is sent again.
        page.click("button:has-text('Save alerts')")
        expect(page.locator(".messages")).to_contain_text("Alert settings saved")
        expect(page.locator("#alert-history tbody tr")).to_have_count(1)
        assert receiver.count() == 1
