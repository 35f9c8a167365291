"""Key lifecycle in real Chromium (issue 19, "Done when"): an owner limits a key to one model
(another model → 403), disables it (401 saying so) and enables it again, then gives it an expiry
that passes (401 naming the expiry). The server runs the in-process limiter (REDIS_URL empty);
its key cache lets changes through within EZAT_KEY_CACHE_TTL (0.5 s)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import openai
import pytest
from playwright.sync_api import expect

from tests.support.browser import App, shot
from tests.waiting import wait_for

pytestmark = pytest.mark.browser

SONNET = "anthropic/claude-sonnet-5-5"


def _call(client: openai.OpenAI, model: str) -> int:
    try:
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=16
        )
    except openai.APIStatusError as exc:
        return exc.status_code
    return 200


def _error(client: openai.OpenAI, model: str) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=16
        )
    return info.value


def test_allow_list_disable_enable_and_expiry(own_customer_page: Any, own_app: App) -> None:
    page, app = own_customer_page, own_app
    page.goto(app.url + "/dashboard/keys/")
    page.click("text=Create key")
    page.fill("#id_name", "scoped-key")
    page.select_option("#id_spend_cap_period", "day")
    page.fill("#id_spend_cap_usd", "3")
    page.check(f"input[name=allowed_models][value='{SONNET}']")
    shot(page, "30-key-create-lifecycle")
    page.click("button:has-text('Create key')")
    secret = page.get_by_test_id("new-key-secret").input_value()
    client = openai.OpenAI(base_url=app.url + "/openai/v1", api_key=secret, max_retries=0)

    # Allow-list: the allowed model (by alias) answers; another model is a 403.
    assert _call(client, "sonnet") == 200
    denied = _error(client, "opus")
    assert denied.status_code == 403 and denied.body["type"] == "permission_error"
    assert "opus" in denied.body["message"]

    page.goto(app.url + "/dashboard/keys/")
    row = page.locator("#keys tr", has_text="scoped-key")
    expect(row).to_contain_text(SONNET)
    expect(row).to_contain_text("/ day")

    # Disable → 401 saying so; enable → it works again.
    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("button:has-text('Disable')").click()
    expect(page.locator("#keys tr", has_text="scoped-key")).to_contain_text("disabled")
    shot(page, "31-key-disabled")
    wait_for(lambda: _call(client, "sonnet") == 401, 60, what="the disabled key refused")
    refused = _error(client, "sonnet")
    assert "disabled" in refused.body["message"]
    page.locator("#keys tr", has_text="scoped-key").locator("button:has-text('Enable')").click()
    expect(page.locator("#keys tr", has_text="scoped-key")).to_contain_text("active")
    wait_for(lambda: _call(client, "sonnet") == 200, 60, what="the enabled key accepted")

    # Expiry: the next UTC minute that is at least 20 s away (the input's resolution).
    now = datetime.now(UTC)
    expires = (now + timedelta(seconds=80)).replace(second=0, microsecond=0)
    if expires - now < timedelta(seconds=20):
        expires += timedelta(minutes=1)
    page.locator("#keys tr", has_text="scoped-key").locator("text=Edit limits").click()
    page.fill("#id_expires_at", expires.strftime("%Y-%m-%dT%H:%M"))
    page.click("button:has-text('Save limits')")
    row = page.locator("#keys tr", has_text="scoped-key")
    expect(row).to_contain_text(expires.strftime("%Y-%m-%d %H:%M") + " UTC")
    assert _call(client, "sonnet") == 200  # not yet
    wait_for(lambda: _call(client, "sonnet") == 401, 150, what="the key to expire")
    expired = _error(client, "sonnet")
    assert "expired" in expired.body["message"]
    assert expires.strftime("%Y-%m-%dT%H:%M:00Z") in expired.body["message"]
    page.reload()
    expect(page.locator("#keys tr", has_text="scoped-key")).to_contain_text("expired")
    shot(page, "32-key-expired")


def test_past_expiry_and_the_management_keys_page(own_customer_page: Any, own_app: App) -> None:
    page, app = own_customer_page, own_app
    page.goto(app.url + "/dashboard/keys/new/")
    page.fill("#id_name", "never-saved")
    page.fill("#id_expires_at", "2020-01-01T00:00")
    page.click("button:has-text('Create key')")
    expect(page.locator(".field.has-error")).to_contain_text("The expiry must be in the future.")
    page.goto(app.url + "/dashboard/keys/")
    expect(page.locator("#keys")).not_to_contain_text("never-saved")

    page.click("text=Management keys")
    page.fill("#id_name", "deploy-script")
    page.click("button:has-text('Create management key')")
    secret = page.get_by_test_id("new-key-secret").input_value()
    assert re.fullmatch(r"ezat_mk_[0-9A-Za-z]{38}", secret)
    page.reload()
    assert secret not in page.content()
    expect(page.locator("#management-keys")).to_contain_text("deploy-script")
    shot(page, "33-management-keys")
