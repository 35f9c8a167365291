"""Issue 34 "done when", in real Chromium at 1280 px and 390 px (screenshots of each in
artifacts/screenshots/v3-*.png): the cost column is inside the viewport, the chart shows today,
every money figure follows the one rule, and the live views keep their counts."""

from __future__ import annotations

import re
from typing import Any

import openai
import pytest
from playwright.sync_api import expect

from tests.support.browser import App, new_page, shot, sign_in

pytestmark = pytest.mark.browser

WIDTHS = {1280: 900, 390: 844}
COST = re.compile(r"^−?\$\d{1,3}(,\d{3})*\.\d{6}$")  # per-request: 6 decimals (core/money.py)
TOTAL = re.compile(r"^[−+]?\$\d{1,3}(,\d{3})*\.\d{2,9}$")  # balances and totals

# The box of an element as the user sees it: clipped by every scrolling or clipping ancestor.
VISIBLE_BOX_JS = """
(el) => {
  let r = el.getBoundingClientRect();
  let left = r.left, right = r.right, top = r.top, bottom = r.bottom;
  for (let p = el.parentElement; p; p = p.parentElement) {
    const o = getComputedStyle(p).overflowX;
    if (o === 'auto' || o === 'scroll' || o === 'hidden' || o === 'clip') {
      const b = p.getBoundingClientRect();
      left = Math.max(left, b.left); right = Math.min(right, b.right);
    }
  }
  return {left, right, width: r.width, full: right - left >= r.width - 0.5,
          vw: document.documentElement.clientWidth, display: getComputedStyle(el).display};
}
"""


def _page(browser: Any, app: App, width: int) -> Any:
    page = new_page(browser, width=width, height=WIDTHS[width])
    sign_in(page, app, app.customer)
    return page


@pytest.mark.parametrize("width", sorted(WIDTHS))
def test_cost_column_is_inside_the_viewport(browser: Any, own_app: App, width: int) -> None:
    page = _page(browser, own_app, width)
    try:
        for path, name in (("/dashboard/requests/", "requests"), ("/dashboard/", "overview")):
            page.goto(own_app.url + path)
            cells = page.locator("#request-log tbody tr td.col-cost")
            expect(cells.first).to_be_visible()
            assert cells.count() >= 5
            for i in range(min(cells.count(), 8)):
                box = cells.nth(i).evaluate(VISIBLE_BOX_JS)
                assert box["full"] and box["right"] <= box["vw"] + 0.5, (path, width, box)
                assert COST.match(cells.nth(i).inner_text().strip()), cells.nth(i).inner_text()
            for column in ("col-time", "col-model", "col-status", "col-tokens"):
                cell = page.locator(f"#request-log tbody tr td.{column}").first
                box = cell.evaluate(VISIBLE_BOX_JS)
                assert box["display"] != "none" and box["full"], (path, width, column, box)
            if width < 640:
                # A two-line card: model and status above, time, tokens and cost below.
                row = page.locator("#request-log tbody tr").first
                lines = row.evaluate(
                    "(tr) => new Set(Array.from(tr.children).filter((td) =>"
                    " getComputedStyle(td).display !== 'none').map((td) =>"
                    " Math.round(td.getBoundingClientRect().top))).size"
                )
                assert lines == 2, lines
                assert page.locator("#request-log thead").evaluate(
                    "(h) => h.getBoundingClientRect().height <= 1"
                )
            shot(page, f"v3-{name}-{width}")
    finally:
        page.context.close()


def test_live_views_keep_their_counts(browser: Any, own_app: App) -> None:
    """Item 4: the live feed's "N requests" grows with its rows; the overview's recent list and
    its 24-hour count update without a reload."""
    from tests.dashboard.test_request_log_browser import _in_thread

    def key() -> str:
        from accounts import services
        from accounts.models import Organization

        with own_app.blocker.unblock():
            org = Organization.objects.get(pk=own_app.org_id)
            return services.create_api_key(org=org, name="v3-live").secret

    secret = str(_in_thread(key))
    client = openai.OpenAI(base_url=own_app.url + "/openai/v1", api_key=secret, max_retries=0)
    log = _page(browser, own_app, 1280)
    home = log.context.new_page()
    try:
        log.goto(own_app.url + "/dashboard/requests/")
        expect(log.locator("#live-status")).to_have_text("live")
        count = log.get_by_test_id("request-count")
        before = int(count.inner_text().split()[0].replace(",", ""))
        home.goto(own_app.url + "/dashboard/")
        requests_24h = home.get_by_test_id("requests-24h")
        before_24h = int(requests_24h.inner_text().replace(",", ""))
        # Wait until the overview's socket is open: a row pushed before it would be missed.
        expect(home.locator("#request-log")).to_have_attribute("data-live", "open")
        raw = client.chat.completions.with_raw_response.create(
            model="sonnet", messages=[{"role": "user", "content": "live counts"}], max_tokens=16
        )
        request_id = raw.headers["x-request-id"]
        expect(
            log.locator(f'#request-log tbody tr[data-request-id="{request_id}"]')
        ).to_be_visible()
        expect(count).to_have_text(f"{before + 1:,} requests")
        live_row = home.locator(f'#request-log tbody tr[data-request-id="{request_id}"]')
        expect(live_row).to_be_visible()
        expect(requests_24h).to_have_text(f"{before_24h + 1:,}")
        assert home.locator("#request-log tbody tr").count() <= 10
        assert COST.match(live_row.locator("td.col-cost").inner_text().strip())
        shot(home, "v3-overview-live-1280")
    finally:
        log.context.close()


CHART_JS = """
() => {
  const shown = Array.from(document.querySelectorAll('svg.chart')).filter(
    (s) => getComputedStyle(s).display !== 'none');
  return shown.map((svg) => {
    const box = svg.getBoundingClientRect(), box_parent = svg.parentElement.getBoundingClientRect();
    const labels = Array.from(svg.querySelectorAll('text.axis.x'));
    const last = labels[labels.length - 1], r = last.getBoundingClientRect();
    const fills = new Set(Array.from(svg.querySelectorAll('rect')).map((x) => x.getAttribute('fill')));
    return {last: last.textContent, lastLeft: r.left, lastRight: r.right,
            left: box.left, right: box.right, parentRight: box_parent.right,
            vw: document.documentElement.clientWidth, fills: fills.size,
            narrow: svg.classList.contains('chart-narrow'),
            font: Math.min(...Array.from(svg.querySelectorAll('text')).map((t) =>
              parseFloat(getComputedStyle(t).fontSize) * Math.abs(t.getScreenCTM().a)))};
  });
}
"""


@pytest.mark.parametrize("width", sorted(WIDTHS))
def test_charts_fit_their_box_and_show_today(browser: Any, own_app: App, width: int) -> None:
    page = _page(browser, own_app, width)
    try:
        for path, name in (("/dashboard/", "overview"), ("/dashboard/usage/?days=30", "usage")):
            page.goto(own_app.url + path)
            charts = page.evaluate(CHART_JS)
            # One chart per metric: the narrow one (latest days) on a phone, the wide one else.
            assert len(charts) == (1 if path == "/dashboard/" else 2), (path, width, charts)
            assert all(c["narrow"] == (width < 640) for c in charts), (path, width, charts)
            assert min(c["font"] for c in charts) >= (11 if width < 640 else 9), charts
            for chart in charts:
                # Fits its box (no scrolling to find today) and ends with today, on screen.
                assert chart["right"] <= chart["parentRight"] + 0.5, chart
                assert chart["last"] == "Today", chart
                assert chart["lastLeft"] >= 0 and chart["lastRight"] <= chart["vw"], chart
            # Two models seeded: two distinct colours in the cost chart.
            assert charts[0]["fills"] == 2, charts[0]
            for text in page.locator(".stat .value").all_inner_texts():
                if "$" in text:
                    assert TOTAL.match(text.strip()), text
            shot(page, f"v3-chart-{name}-{width}")
    finally:
        page.context.close()


def test_skip_link_and_favicon(browser: Any, own_app: App) -> None:
    page = _page(browser, own_app, 390)
    try:
        page.goto(own_app.url + "/dashboard/usage/?days=30")
        skip = page.get_by_test_id("skip-link")
        assert skip.evaluate("(a) => a.getBoundingClientRect().bottom <= 0")  # off-screen
        page.keyboard.press("Tab")
        expect(skip).to_be_focused()
        assert skip.evaluate("(a) => a.getBoundingClientRect().top >= 0")  # shown when focused
        page.keyboard.press("Enter")
        expect(page.locator("main#main")).to_be_focused()
        icon = page.request.get(own_app.url + "/favicon.ico")
        assert icon.ok and "svg" in icon.headers["content-type"]
    finally:
        page.context.close()


def test_playground_spinner_stop_and_empty_prompt(browser: Any, own_app: App) -> None:
    """Item 6: an empty prompt is refused next to the field without a request; a run shows a
    spinner and a Stop button, and Stop ends it."""
    import httpx

    from tests.dashboard.test_request_log_browser import _sim_url

    page = _page(browser, own_app, 1280)
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if r.url.endswith("/playground/run") else None)
    try:
        page.goto(own_app.url + "/dashboard/playground/")
        page.fill("#pg-prompt", "   ")
        page.click("#pg-run")
        expect(page.get_by_test_id("pg-prompt-error")).to_be_visible()
        expect(page.locator("#pg-prompt")).to_have_attribute("aria-invalid", "true")
        assert sent == []  # nothing was sent
        shot(page, "v3-playground-empty-1280")
        # A slow stream (the simulator waits 0.4 s between events), stopped midway.
        httpx.post(
            _sim_url(own_app) + "/_sim/script",
            json={"faults": [{"match": "slow playground run", "event_delay": 0.4, "times": 1}]},
            timeout=10,
        )
        page.fill("#pg-prompt", "A slow playground run, please.")
        expect(page.get_by_test_id("pg-prompt-error")).to_be_hidden()
        page.click("#pg-run")
        expect(page.get_by_test_id("pg-spinner")).to_be_visible()
        expect(page.get_by_test_id("pg-stop")).to_be_visible()
        expect(page.locator("#pg-run")).to_be_disabled()
        shot(page, "v3-playground-running-1280")
        page.get_by_test_id("pg-stop").click()
        expect(page.get_by_test_id("pg-stopped")).to_be_visible()
        expect(page.get_by_test_id("pg-spinner")).to_be_hidden()
        expect(page.get_by_test_id("pg-stop")).to_be_hidden()
        expect(page.locator("#pg-run")).to_be_enabled()
        expect(page.locator("#pg-error")).to_be_hidden()
    finally:
        page.context.close()


@pytest.mark.parametrize("width", sorted(WIDTHS))
def test_key_spend_chart_with_its_cap(browser: Any, own_app: App, width: int) -> None:
    from tests.dashboard.test_request_log_browser import _in_thread

    def cap() -> int:
        from accounts.models import ApiKey

        with own_app.blocker.unblock():
            key = ApiKey.objects.get(org_id=own_app.org_id, name="batch-jobs")
            ApiKey.objects.filter(pk=key.pk).update(spend_cap_nano=50_000_000)  # $0.05 / month
            return key.pk

    key_id = int(_in_thread(cap))
    page = _page(browser, own_app, width)
    try:
        page.goto(own_app.url + "/dashboard/keys/")
        page.locator(f'#keys tr[data-key-id="{key_id}"] [data-testid=key-spend-link]').click()
        card = page.locator("#key-spend")
        expect(card).to_be_visible()
        expect(card.get_by_test_id("key-cap")).to_contain_text("Cap: $0.05 / month")
        chart = card.locator("svg.chart:visible")
        expect(chart).to_have_count(1)
        expect(chart.locator("line.cap")).to_have_count(1)
        expect(chart.locator("text.cap-label")).to_have_text("cap $0.05 / month")
        expect(chart.locator("text.axis.x").last).to_have_text("Today")
        box = chart.evaluate(VISIBLE_BOX_JS)
        assert box["full"] and box["right"] <= box["vw"] + 0.5, box
        shot(page, f"v3-key-spend-{width}")
    finally:
        page.context.close()


MONEY_JS = """
() => {
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const el = walker.currentNode.parentElement;
    if (!el || el.closest('svg, script, style, textarea, code, pre, option')) continue;
    const cs = getComputedStyle(el);
    if (cs.display === 'none' || cs.visibility === 'hidden') continue;
    for (const m of walker.currentNode.textContent.matchAll(/[-−+]?\\$[-\\d.,]+/g)) {
      out.push({text: m[0], cls: el.className || '', cell: !!el.closest('td.col-cost, #receipt td, #receipt th, dl.facts dd')});
    }
  }
  return out;
}
"""
ANY_MONEY = re.compile(r"^[−+]?\$\d{1,3}(,\d{3})*(\.\d{2,9})?$")


@pytest.mark.parametrize("width", sorted(WIDTHS))
def test_every_money_figure_follows_the_rule(browser: Any, own_app: App, width: int) -> None:
    """Item 3 on every page: no "$-0.003193000", no "$5.0000000", per-request costs (the log, the
    receipt, its hold and ledger entry) with exactly 6 decimals."""
    seed = f"req_seed_{own_app.customer.removeprefix('customer-')}_1_0"
    page = _page(browser, own_app, width)
    try:
        for path in (
            "/dashboard/",
            "/dashboard/requests/",
            f"/dashboard/requests/{seed}",
            "/dashboard/usage/?days=30",
            "/dashboard/balance/",
            "/dashboard/keys/",
        ):
            page.goto(own_app.url + path)
            figures = page.evaluate(MONEY_JS)
            assert figures, path
            for f in figures:
                text = f["text"].rstrip(".,")
                assert ANY_MONEY.match(text), (path, width, f)
                assert not re.search(r"\.\d*0{4,}$", text) or COST.match(text), (path, f)
                if f["cell"]:
                    assert COST.match(text), (path, width, f)
            shot(page, f"v3-money-{path.strip('/').replace('/', '-') or 'home'}-{width}")
    finally:
        page.context.close()
