"""The dashboard in a real browser: sign in, keys, live request log, usage chart, revocation,
and an operator's credit grant reaching the customer's balance page.

Screenshots of every page land in artifacts/screenshots/ (gitignored) for a human to look at.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.support.browser import App, new_page, shot, sign_in
from tests.waiting import wait_for

pytestmark = pytest.mark.browser


def _create_key(page: Any, app: App, name: str) -> str:
    page.goto(app.url + "/dashboard/keys/")
    page.click("text=Create key")
    page.fill("#id_name", name)
    page.fill("#id_rpm_limit", "120")
    page.fill("#id_spend_cap_usd", "5")
    page.click("button:has-text('Create key')")
    secret_field = page.get_by_test_id("new-key-secret")
    expect(secret_field).to_be_visible()
    secret = secret_field.input_value()
    assert re.fullmatch(r"ezat_sk_[0-9A-Za-z]{38}", secret)
    return secret


def _usd(nano: int) -> str:
    return f"${Decimal(nano) / 10**9:,.2f}"


def test_dashboard_pages_render(own_customer_page: Any, own_app: App) -> None:
    page, app = own_customer_page, own_app
    # This test's own org: $10 of credit, before or after the server's reconciliation has
    # charged its seeded usage (nothing else touches it).
    settled = _usd(10 * 10**9 - app.seed_cost_nano)
    expect(page.get_by_test_id("balance")).to_have_text(
        re.compile(rf"^(\$10\.00|{re.escape(settled)})$")
    )
    shot(page, "02-overview")

    secret = _create_key(page, app, "docs-demo")
    page.click("[data-copy]")
    expect(page.locator("[data-copy]")).to_have_text("Copied")
    shot(page, "04-key-created")
    # Post/Redirect/Get: reloading the result page mints nothing and shows the secret no more.
    page.reload()
    expect(page).to_have_url(re.compile(r"/dashboard/keys/$"))
    expect(page.locator("body")).to_contain_text("shown once and cannot be shown again")
    expect(page.locator("#keys tr", has_text="docs-demo")).to_have_count(1)
    assert secret not in page.content()  # shown once, never again
    shot(page, "03-keys")

    page.locator("tr", has_text="docs-demo").locator("text=Edit limits").click()
    page.fill("#id_rpm_limit", "300")
    shot(page, "05-key-edit")
    page.click("button:has-text('Save limits')")
    expect(page.locator("tr", has_text="docs-demo")).to_contain_text("300")

    page.goto(app.url + "/dashboard/usage/?days=30")
    expect(page.locator("svg.chart:visible")).to_have_count(2)  # and a narrow pair, hidden
    assert page.locator("svg.chart-wide rect").count() > 10
    expect(page.get_by_test_id("cache-savings")).not_to_have_text("$0.00")
    shot(page, "06-usage-by-model")
    page.goto(app.url + "/dashboard/usage/?days=30&split=key")
    expect(page.locator("#usage-breakdown")).to_contain_text("batch-jobs")
    shot(page, "07-usage-by-key")

    page.goto(app.url + "/dashboard/requests/")
    expect(page.locator("#live-status")).to_have_text("live")
    expect(page.locator("#request-log tbody tr")).to_have_count(17)
    shot(page, "08-requests")
    page.fill(
        "#id_request_id",
        page.locator("#request-log tbody tr").nth(3).get_attribute("data-request-id"),
    )
    page.click("button:has-text('Filter')")
    expect(page.locator("#request-log tbody tr")).to_have_count(1)

    page.goto(app.url + "/dashboard/balance/")
    expect(page.locator("#ledger")).to_contain_text("welcome credit")
    shot(page, "09-balance")
    page.goto(app.url + "/dashboard/members/")
    expect(page.locator("#members")).to_contain_text(app.customer)
    # Members join by invitation only: the owner invites an address, which stays pending.
    page.fill("#id_email", "new.colleague@example.test")
    page.select_option("#id_role", "member")
    page.click("button:has-text('Send invitation')")
    expect(page.locator(".messages")).to_contain_text("Invitation sent to new.colleague@")
    expect(page.locator("#invitations")).to_contain_text("new.colleague@example.test")
    expect(page.locator("#members")).not_to_contain_text("new.colleague")
    shot(page, "10-members")


def test_login_page(browser: Any, app: App) -> None:
    page = new_page(browser)
    page.goto(app.url + "/dashboard/")
    page.wait_for_url("**/login/?next=/dashboard/")
    page.fill("#id_username", app.customer)
    page.fill("#id_password", "wrong password")
    page.click("button[type=submit]")
    expect(page.locator(".error-box")).to_be_visible()
    shot(page, "01-login")
    page.context.close()


def test_operator_grants_credit_customer_sees_it(
    browser: Any, operator_page: Any, own_app: App
) -> None:
    admin, app = operator_page, own_app
    admin.goto(app.url + "/admin/accounts/organization/")
    row = admin.locator("tr", has_text=app.org_name)
    shot(admin, "20-admin-organizations")
    row.locator("input[name=_selected_action]").check()
    admin.select_option("select[name=action]", "grant_credit_action")
    admin.click("button[name=index]")
    admin.fill("#id_amount_usd", "25.50")
    admin.fill("#id_memo", "invoice INV-7")
    shot(admin, "21-admin-grant-credit")
    admin.click("input[value='Grant credit']")
    expect(admin.locator(".messagelist")).to_contain_text("Granted $25.50")
    admin.goto(app.url + "/admin/catalog/deployment/")
    expect(admin.locator("#result_list")).to_contain_text("in flight")
    shot(admin, "22-admin-deployments")
    admin.goto(app.url + "/admin/billing/usagerecord/")
    shot(admin, "23-admin-usage-records")

    customer = new_page(browser)
    sign_in(customer, app, app.customer)
    customer.goto(app.url + "/dashboard/balance/")
    row = customer.locator("#ledger tr", has_text="invoice INV-7")
    expect(row).to_contain_text("+$25.50")
    # 10 welcome + 25.50 granted, before or after reconciliation charged the seeded usage.
    settled = _usd(35_500_000_000 - app.seed_cost_nano)
    expect(customer.get_by_test_id("balance")).to_have_text(
        re.compile(rf"^(\$35\.50|{re.escape(settled)})$")
    )
    customer.context.close()


def test_key_used_through_gateway_live_then_revoked(own_customer_page: Any, own_app: App) -> None:
    """Needs the gateway's /openai/v1/chat/completions (and its live publish)."""
    import openai

    page, app = own_customer_page, own_app
    secret = _create_key(page, app, "sdk-live")
    page.goto(app.url + "/dashboard/usage/?days=7")
    requests_before = int(page.get_by_test_id("usage-requests").inner_text().replace(",", ""))

    page.goto(app.url + "/dashboard/requests/")
    expect(page.locator("#live-status")).to_have_text("live")
    rows_before = page.locator("#request-log tbody tr").count()

    client = openai.OpenAI(base_url=app.url + "/openai/v1", api_key=secret, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="sonnet",
        messages=[{"role": "user", "content": "Say hello to the dashboard."}],
        max_tokens=64,
    )
    completion = raw.parse()
    assert completion.choices[0].message.content
    request_id = raw.headers.get("x-request-id")
    assert request_id, "the gateway answers with x-request-id"

    # Appears without a reload: pushed over the websocket.
    live_row = page.locator(f'#request-log tbody tr[data-request-id="{request_id}"]')
    expect(live_row).to_be_visible()
    expect(live_row).to_contain_text("sonnet")
    assert page.locator("#request-log tbody tr").count() == rows_before + 1
    shot(page, "11-requests-live-row")
    # A refused request is pushed too, with its status and the error the client saw.
    try:
        client.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "x"}]
        )
    except openai.NotFoundError as exc:
        refused_id = exc.response.headers["x-request-id"]
    else:
        raise AssertionError("an unknown model was answered")
    error_row = page.locator(f'#request-log tbody tr[data-request-id="{refused_id}"]')
    expect(error_row).to_contain_text("error 404")
    expect(error_row.locator(".error-message")).to_contain_text("no-such-model")

    page.goto(app.url + "/dashboard/usage/?days=7")
    expect(page.get_by_test_id("usage-requests")).to_have_text(str(requests_before + 1))
    page.goto(app.url + "/dashboard/usage/?days=7&split=key")
    expect(page.locator("#usage-breakdown")).to_contain_text("sdk-live")
    shot(page, "12-usage-after-call")

    page.goto(app.url + "/dashboard/keys/")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("tr", has_text="sdk-live").locator("button:has-text('Revoke')").click()
    expect(page.locator("tr", has_text="sdk-live")).to_contain_text("revoked")

    # Refused once this server's key cache (EZAT_KEY_CACHE_TTL 0.5 s) has let the key go.
    def refused() -> bool:
        try:
            client.chat.completions.create(
                model="sonnet", messages=[{"role": "user", "content": "again"}], max_tokens=16
            )
        except openai.AuthenticationError as exc:
            return exc.status_code == 401
        return False

    wait_for(refused, 60, what="the revoked key to be refused")
