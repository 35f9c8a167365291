"""Every dashboard page at phone and desktop widths in real Chromium: no horizontal overflow
(scrollWidth ≤ innerWidth and no element past the viewport outside a scroll container), the
nav collapses behind a menu button, chart text ≥ 11 px, and text contrast ≥ 4.5:1 (WCAG AA)
computed from the rendered colours.

Screenshots land in artifacts/screenshots/ (phone-*.png, desktop-*.png).
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.support.browser import App, new_page, shot, sign_in

pytestmark = pytest.mark.browser

PHONE, SMALL_PHONE, DESKTOP = 390, 375, 1440
HEIGHTS = {SMALL_PHONE: 667, PHONE: 844, DESKTOP: 900}  # iPhone SE, iPhone 12-15, a laptop
PAGES = [
    "/dashboard/",
    "/dashboard/requests/",
    "/dashboard/usage/?days=30",
    "/dashboard/usage/?days=30&split=key",
    "/dashboard/balance/",
    "/dashboard/keys/",
    "/dashboard/keys/new/",
    "/dashboard/fallbacks/",
    "/dashboard/members/",
    "/dashboard/playground/",
    "/dashboard/alerts/",
    "/dashboard/invitations/",
]

# Elements that lie past the viewport but inside an ancestor that clips or scrolls them
# (a table scrolling inside its card) do not widen the page; anything else does.
OVERFLOW_JS = """
() => {
  const vw = document.documentElement.clientWidth;
  const contained = (el) => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if (o === 'auto' || o === 'scroll' || o === 'hidden' || o === 'clip') return true;
    }
    return false;
  };
  const bad = [];
  for (const el of document.body.querySelectorAll('*')) {
    const cs = getComputedStyle(el);
    if (cs.display === 'none' || cs.visibility === 'hidden') continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    if ((r.right > vw + 0.5 || r.left < -0.5) && !contained(el)) {
      bad.push(`${el.tagName.toLowerCase()}.${el.className} [${Math.round(r.left)}, ${Math.round(r.right)}]`);
    }
  }
  return {scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
          clientWidth: vw, bad: bad.slice(0, 15)};
}
"""

# WCAG 2.x relative luminance and contrast ratio, from computed styles. The background is the
# nearest ancestors' background colours composited (alpha) over white; text that is drawn
# outside the box giving it its background (the old header's links spilling onto the page)
# is reported too, since its real background is then unknown.
CONTRAST_JS = """
() => {
  const parse = (c) => {
    const m = c && c.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return null;
    const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
    return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1};
  };
  const blend = (top, bottom) => ({
    r: top.r * top.a + bottom.r * (1 - top.a), g: top.g * top.a + bottom.g * (1 - top.a),
    b: top.b * top.a + bottom.b * (1 - top.a), a: 1});
  const lum = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b);
  };
  const background = (el) => {
    const layers = []; let box = null;
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c.a > 0) { layers.push(c); if (!box) box = e; if (c.a >= 1) break; }
    }
    let out = {r: 255, g: 255, b: 255, a: 1};
    for (let i = layers.length - 1; i >= 0; i--) out = blend(layers[i], out);
    return {color: out, box: box};
  };
  const failures = []; const seen = new Set();
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let checked = 0;
  while (walker.nextNode()) {
    const node = walker.currentNode;
    if (!node.textContent.trim()) continue;
    const el = node.parentElement;
    if (!el || seen.has(el)) continue;
    seen.add(el);
    if (el.closest('script, style, noscript, option, title, .visually-hidden')) continue;
    const cs = getComputedStyle(el);
    if (cs.visibility === 'hidden' || cs.display === 'none') continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    const inSvg = el.closest('svg') !== null;
    const bg = background(el);
    let fg = parse(inSvg ? cs.fill : cs.color);
    if (!fg) continue;
    fg = blend(fg, bg.color);
    const hi = Math.max(lum(fg), lum(bg.color)), lo = Math.min(lum(fg), lum(bg.color));
    const ratio = (hi + 0.05) / (lo + 0.05);
    checked++;
    const label = `${el.tagName.toLowerCase()}.${el.className && el.className.baseVal !== undefined ? el.className.baseVal : el.className} "${node.textContent.trim().slice(0, 30)}"`;
    if (ratio < 4.5) failures.push(`${label}: ${ratio.toFixed(2)}:1 (${cs.color} on rgb(${Math.round(bg.color.r)},${Math.round(bg.color.g)},${Math.round(bg.color.b)}))`);
    const clipped = (() => {
      for (let e = el.parentElement; e; e = e.parentElement) {
        if (getComputedStyle(e).overflowX !== 'visible') return true;  // scrolled, not spilled
        if (e === bg.box) break;
      }
      return false;
    })();
    if (!clipped && bg.box && bg.box !== document.body && bg.box !== document.documentElement) {
      const b = bg.box.getBoundingClientRect();
      if (r.top < b.top - 1 || r.bottom > b.bottom + 1 || r.left < b.left - 1 || r.right > b.right + 1) {
        failures.push(`${label}: drawn outside the box that gives it its background`);
      }
    }
  }
  return {checked: checked, failures: failures.slice(0, 20)};
}
"""

# Axis labels' rendered size: computed font size × the SVG's scale on screen.
CHART_TEXT_JS = """
() => Array.from(document.querySelectorAll('svg.chart text')).map((t) => {
  const m = t.getScreenCTM();
  return parseFloat(getComputedStyle(t).fontSize) * (m ? Math.abs(m.a) : 1);
})
"""


CHART_CLIP_JS = """
() => Array.from(document.querySelectorAll('svg.chart text')).filter((t) => {
  const box = t.getBoundingClientRect(), svg = t.ownerSVGElement.getBoundingClientRect();
  return box.left < svg.left - 0.5 || box.right > svg.right + 0.5;
}).map((t) => t.textContent)
"""


def _request_page(app: App) -> str:
    return f"/dashboard/requests/req_seed_{app.customer.removeprefix('customer-')}_1_0"


def _pages(app: App) -> list[str]:
    return [*PAGES, _request_page(app)]


def _slug(path: str) -> str:
    return path.strip("/").replace("/", "-").replace("?", "-").replace("&", "-") or "home"


def _assert_fits(page: Any, path: str, width: int) -> None:
    result = page.evaluate(OVERFLOW_JS)
    assert result["innerWidth"] == width
    assert result["scrollWidth"] <= result["innerWidth"], (path, width, result)
    assert result["bad"] == [], (path, width, result["bad"])


@pytest.mark.parametrize("width", [SMALL_PHONE, PHONE, DESKTOP])
def test_every_page_fits_the_screen(browser: Any, own_app: App, width: int) -> None:
    page = new_page(browser, width=width, height=HEIGHTS[width])
    try:
        sign_in(page, own_app, own_app.customer)
        for path in _pages(own_app):
            response = page.goto(own_app.url + path)
            assert response is not None and response.status == 200, path
            page.wait_for_load_state("load")
            _assert_fits(page, path, width)
            if path == "/dashboard/invitations/":
                pass  # a page of the account, outside any org: no dashboard nav
            elif width <= PHONE:
                # Collapsed nav: the links hide behind the menu button, which opens them.
                toggle = page.get_by_test_id("nav-toggle")
                expect(toggle).to_be_visible()
                expect(page.locator(".mainnav")).to_be_hidden()
                toggle.click()
                expect(toggle).to_have_attribute("aria-expanded", "true")
                expect(page.locator(".mainnav a", has_text="Playground")).to_be_visible()
                _assert_fits(page, path + " (menu open)", width)
            else:
                expect(page.get_by_test_id("nav-toggle")).to_be_hidden()
                expect(page.locator(".mainnav a", has_text="Alerts")).to_be_visible()
            if width in (PHONE, DESKTOP):
                shot(page, f"{'phone' if width == PHONE else 'desktop'}-{_slug(path)}")
    finally:
        page.context.close()


def test_chart_text_is_at_least_11px_on_a_phone(browser: Any, own_app: App) -> None:
    page = new_page(browser, width=PHONE, height=HEIGHTS[PHONE])
    try:
        sign_in(page, own_app, own_app.customer)
        for path in ("/dashboard/", "/dashboard/usage/?days=30"):
            page.goto(own_app.url + path)
            sizes = page.evaluate(CHART_TEXT_JS)
            assert sizes, f"{path} draws a chart with axis labels"
            assert min(sizes) >= 11, (path, sorted(sizes)[:5])
            # Every label is drawn inside its chart (none clipped at the left edge).
            outside = page.evaluate(CHART_CLIP_JS)
            assert outside == [], (path, outside)
    finally:
        page.context.close()


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_text_contrast_meets_wcag_aa(browser: Any, own_app: App, width: int) -> None:
    page = new_page(browser, width=width, height=HEIGHTS[width])
    try:
        sign_in(page, own_app, own_app.customer)
        for path in _pages(own_app):
            page.goto(own_app.url + path)
            if width <= PHONE and path != "/dashboard/invitations/":
                page.get_by_test_id("nav-toggle").click()
            result = page.evaluate(CONTRAST_JS)
            assert result["checked"] > 3, path
            assert result["failures"] == [], (path, width, result["failures"])
    finally:
        page.context.close()


def test_login_page_fits_and_reads_on_a_phone(browser: Any, app: App) -> None:
    page = new_page(browser, width=PHONE)
    try:
        page.goto(app.url + "/login/")
        _assert_fits(page, "/login/", PHONE)
        result = page.evaluate(CONTRAST_JS)
        assert result["failures"] == [], result["failures"]
    finally:
        page.context.close()
