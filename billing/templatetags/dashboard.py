"""Template filters for money and tokens, and the server-rendered SVG usage chart.

The chart is drawn here, in Python, so the dashboard needs no JavaScript charting library and
no CDN, and a screenshot or a no-JS browser sees the same picture.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import date
from decimal import ROUND_HALF_UP, Decimal

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from billing.pricing import nano_to_usd
from ezat import money

register = template.Library()

# Distinguishable on white and for common colour-vision deficiencies (Okabe–Ito-like).
PALETTE = ("#2563eb", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#7c3aed", "#6b7280")


def _group(digits: str) -> str:
    return f"{int(digits):,}"


def format_usd(nano: int | None, *, sign: bool = False) -> str:
    """$1,234.50 for whole cents; up to six decimals when there are fractions of a cent."""
    if nano is None:
        return "—"
    amount = nano_to_usd(int(nano))
    negative = amount < 0
    amount = abs(amount)
    cents = amount.quantize(Decimal("0.01"))
    if cents == amount:
        text = money.fixed(cents, 2)
    else:
        sixth = amount.quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)
        text = money.fixed(sixth, 6).rstrip("0")
    whole, _, frac = text.partition(".")
    text = f"${_group(whole)}.{frac}"
    if negative:
        return f"−{text}"
    return f"+{text}" if sign and nano else text


@register.filter
def usd(nano: int | None) -> str:
    return format_usd(nano)


@register.filter
def usd_signed(nano: int | None) -> str:
    return format_usd(nano, sign=True)


def compact(number: float) -> str:
    """1234 → 1.2k, 5_600_000 → 5.6M: axis labels and chart tooltips."""
    value = float(number)
    for threshold, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= threshold:
            scaled = value / threshold
            return f"{scaled:.1f}".rstrip("0").rstrip(".") + suffix
    return f"{value:.0f}" if value == int(value) else f"{value:.2g}"


@register.filter
def percent(ratio: Decimal | None) -> str:
    """0.8512 → "85.1 %" (half up); None → "—"."""
    if ratio is None:
        return "—"
    return f"{(ratio * 100).quantize(Decimal('0.1'), rounding=ROUND_HALF_UP)} %"


@register.filter
def tokens(number: int | None) -> str:
    return "—" if number is None else compact(number)


def _nice_ceiling(value: float) -> float:
    """The smallest 1/2/2.5/5 × 10^k at or above value (a readable top gridline)."""
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        candidate = step * 10**exponent
        if candidate >= value * (1 - 1e-12):
            return candidate
    return 10 ** (exponent + 1)


def _usd_axis(nano: float) -> str:
    usd_value = Decimal(str(nano)) / 1_000_000_000
    if usd_value == 0:
        return "$0"
    text = f"{usd_value:f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"${text}"


@register.simple_tag
def stacked_bar_chart(
    days: Sequence[date],
    series: Sequence[object],
    metric: str,
    title: str,
    width: int = 1000,
    height: int = 280,
) -> SafeString:
    """Bars per day, stacked by series. `metric` is "cost" (nano-USD) or "tokens"."""
    fmt: Callable[[float], str] = _usd_axis if metric == "cost" else compact
    values = [list(getattr(s, metric)) for s in series]
    labels = [str(getattr(s, "label", "")) for s in series]
    left, right, top, bottom = 68, 12, 12, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    totals = [sum(v[i] for v in values) for i in range(len(days))]
    peak = max(totals, default=0)
    ceiling = _nice_ceiling(peak)
    parts: list[str] = [
        format_html(
            '<svg class="chart" viewBox="0 0 {} {}" role="img" aria-label="{}" '
            'xmlns="http://www.w3.org/2000/svg" preserveAspectRatio="xMidYMid meet">',
            width,
            height,
            title,
        ),
        format_html("<title>{}</title>", title),
    ]
    for i in range(5):  # gridlines at 0, ¼, ½, ¾ and the top
        value = ceiling * i / 4
        y = top + plot_h - plot_h * i / 4
        parts.append(
            format_html(
                '<line class="grid" x1="{}" x2="{}" y1="{}" y2="{}"/>'
                '<text class="axis" x="{}" y="{}" text-anchor="end">{}</text>',
                left,
                width - right,
                f"{y:.1f}",
                f"{y:.1f}",
                left - 6,
                f"{y + 4:.1f}",
                fmt(value),
            )
        )
    n = max(len(days), 1)
    slot = plot_w / n
    bar = max(min(slot * 0.72, 48), 1)
    label_every = max(1, math.ceil(n / 10))
    for i, day in enumerate(days):
        x = left + slot * i + (slot - bar) / 2
        base = top + plot_h
        for colour_index, (label, vals) in enumerate(zip(labels, values, strict=True)):
            value = vals[i]
            if not value:
                continue
            h = plot_h * value / ceiling
            base -= h
            parts.append(
                format_html(
                    '<rect x="{}" y="{}" width="{}" height="{}" fill="{}">'
                    "<title>{} · {}: {}</title></rect>",
                    f"{x:.2f}",
                    f"{base:.2f}",
                    f"{bar:.2f}",
                    f"{max(h, 0.5):.2f}",
                    PALETTE[colour_index % len(PALETTE)],
                    day.isoformat(),
                    label,
                    fmt(value),
                )
            )
        if i % label_every == 0 or (i == n - 1 and n <= 10):
            parts.append(
                format_html(
                    '<text class="axis" x="{}" y="{}" text-anchor="middle">{}</text>',
                    f"{left + slot * i + slot / 2:.1f}",
                    height - 10,
                    day.strftime("%b %-d"),
                )
            )
    if peak == 0:
        parts.append(
            format_html(
                '<text class="empty" x="{}" y="{}" text-anchor="middle">{}</text>',
                left + plot_w / 2,
                top + plot_h / 2,
                "No usage in this period",
            )
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # every interpolated value above went through format_html


@register.simple_tag
def legend(series: Sequence[object]) -> SafeString:
    items = "".join(
        format_html(
            '<li><span class="swatch" style="background:{}"></span>{}</li>',
            PALETTE[i % len(PALETTE)],
            getattr(s, "label", ""),
        )
        for i, s in enumerate(series)
    )
    return mark_safe(f'<ul class="legend">{items}</ul>')  # items are escaped by format_html


@register.filter
def swatch(index: int) -> str:
    return PALETTE[int(index) % len(PALETTE)]


@register.filter
def attempts_title(attempts: list[object]) -> str:
    from billing.dashboard_selectors import attempts_summary

    return attempts_summary(attempts)  # type: ignore[arg-type]  # autoescaped by the template


@register.filter
def usd_exact(nano: int | None) -> str:
    """All nine decimals (receipts: the amount exactly as billed)."""
    if nano is None:
        return "—"
    return f"${money.usd_from_nano(int(nano), 9)}"
