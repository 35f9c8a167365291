"""The operator console's change lists fit a 1440 px window (issue 19: the usage-record list
was 1,287 px wide inside a 791 px area, the models list clipped) and ledger amounts keep their
minus sign on the same line."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.browser import PASSWORD, App, new_page, shot

pytestmark = pytest.mark.browser

LISTS = [
    "/admin/billing/usagerecord/",
    "/admin/billing/ledgerentry/",
    "/admin/billing/requestlog/",
    "/admin/catalog/model/",
    "/admin/accounts/organization/",
]

FIT_JS = """
() => {
  const results = document.querySelector('.results');
  const table = document.querySelector('#result_list');
  return {page: document.documentElement.scrollWidth, inner: window.innerWidth,
          area: results ? results.clientWidth : null, table: table ? table.scrollWidth : null};
}
"""


def test_change_lists_fit_a_1440px_window(browser: Any, app: App) -> None:
    page = new_page(browser, width=1440)
    try:
        page.goto(app.url + "/admin/login/")
        page.fill("#id_username", app.operator)
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_url("**/admin/")
        assert "EZAT Router operator console" in page.inner_text("#site-name")
        for path in LISTS:
            page.goto(app.url + path)
            sizes = page.evaluate(FIT_JS)
            assert sizes["table"] is not None, path
            assert sizes["page"] <= sizes["inner"], (path, sizes)
            assert sizes["table"] <= sizes["area"] + 1, (path, sizes)
            shot(page, "admin-" + path.strip("/").replace("/", "-"))
        page.goto(app.url + "/admin/billing/ledgerentry/")
        heights = page.evaluate(
            "() => Array.from(document.querySelectorAll('#result_list .amount'))"
            ".map((e) => e.getClientRects().length)"
        )
        assert heights and max(heights) == 1  # one line box each: nothing wrapped
        # A 7-digit context window is shown whole in its field (it read "100000" for 1,000,000).
        page.goto(app.url + "/admin/catalog/model/")
        page.locator("#result_list tbody tr th a").first.click()
        field = page.locator("#id_context_window")
        field.fill("1000000")
        fits = field.evaluate("(e) => e.scrollWidth <= e.clientWidth")
        assert fits
        # Signing out lands on the admin's own sign-in.
        page.click("#logout-form button")
        page.wait_for_url("**/admin/login/")
    finally:
        page.context.close()
