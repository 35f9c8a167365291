"""Template filters for money and tokens, and the server-rendered SVG usage chart.

The chart is drawn here, in Python, so the dashboard needs no JavaScript charting library and
no CDN, and a screenshot or a no-JS browser sees the same picture.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime
from decimal import ROUND_HALF_UP, Decimal

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from ezat import money

register = template.Library()

# Distinguishable on white and for common colour-vision deficiencies (Okabe–Ito-like).
PALETTE = ("#2563eb", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#7c3aed", "#6b7280")


def format_usd(nano: int | None, *, sign: bool = False) -> str:
    """A balance or total (ezat.money.usd_total): 2 decimals; under $1, 4 significant digits."""
    return "—" if nano is None else money.usd_total(int(nano), sign=sign)


@register.filter
def usd(nano: int | None) -> str:
    """Balances and totals: "$25.00", "$0.006569"."""
    return format_usd(nano)


@register.filter
def usd_signed(nano: int | None) -> str:
    return format_usd(nano, sign=True)


@register.filter
def usd_cost(nano: int | None) -> str:
    """Per-request costs: always six decimals, "$0.026100"."""
    return "—" if nano is None else money.usd_cost(int(nano))


@register.simple_tag
def usd_cap(nano: int | None, period: str = "month") -> str:
    """A spend cap as set: "$5 / month", "$0.0001 / day"; "none" without a cap."""
    return money.usd_cap(None if nano is None else int(nano), period or "month")


@register.filter
def duration(ms: int | float | None) -> str:
    """Milliseconds for people: "850 ms", "11.5 s"."""
    return money.duration(ms)


@register.filter
def ago(moment: datetime | None) -> str:
    """ "just now", "5 minutes ago", "2 days ago"; "never" for None."""
    if moment is None:
        return "never"
    return money.ago((timezone.now() - moment).total_seconds())


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


def series_colour(label: str) -> str:
    """A series' colour, derived from its label (the model id, or the key's label): the same on
    every page and every load, whatever the series' rank (issue 19)."""
    digest = hashlib.blake2s(label.encode(), digest_size=2).digest()
    return PALETTE[int.from_bytes(digest, "big") % len(PALETTE)]


def _ceiling(peak: float, *, integer: bool) -> float:
    """The top gridline. Counts (tokens) get integer quarter ticks: the top is 4 × a whole
    step, never 0.25 tokens."""
    if not integer:
        return _nice_ceiling(peak)
    step = max(1, math.ceil(_nice_ceiling(peak / 4)))
    return float(step * 4)


# Axis text is 11 px on a desktop and 16 user units on a phone (dashboard.css); a label's
# width is budgeted at 10 user units per character so the longest one fits left of the axis.
AXIS_CHAR_WIDTH = 10


@register.simple_tag
def stacked_bar_chart(
    days: Sequence[date],
    series: Sequence[object],
    metric: str,
    title: str,
    width: int = 1000,
    height: int = 280,
) -> SafeString:
    """Bars per bucket, stacked by series. `metric` is "cost" (nano-USD) or "tokens". Buckets
    are UTC days (dates) or, for the last 24 hours, UTC hours (aware datetimes)."""
    fmt: Callable[[float], str] = _usd_axis if metric == "cost" else compact
    # A bar's tooltip is an amount, so it reads like every other total (ezat.money).
    tip: Callable[[float], str] = (
        (lambda v: money.usd_total(int(v))) if metric == "cost" else compact
    )
    values = [list(getattr(s, metric)) for s in series]
    labels = [str(getattr(s, "label", "")) for s in series]
    totals = [sum(v[i] for v in values) for i in range(len(days))]
    peak = max(totals, default=0)
    if peak == 0:
        # No axes to misread: just the message (issue 19).
        return format_html(
            '<p class="chart-empty muted" role="img" aria-label="{}">No usage in this period</p>',
            title,
        )
    ceiling = _ceiling(peak, integer=metric != "cost")
    ticks = [fmt(ceiling * i / 4) for i in range(5)]
    right, top, bottom = 12, 12, 30
    left = max(48, 12 + AXIS_CHAR_WIDTH * max(len(t) for t in ticks))
    plot_w, plot_h = width - left - right, height - top - bottom
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
                ticks[i],
            )
        )
    n = max(len(days), 1)
    slot = plot_w / n
    bar = max(min(slot * 0.72, 48), 1)
    label_every = max(1, math.ceil(n / 10))
    for i, day in enumerate(days):
        x = left + slot * i + (slot - bar) / 2
        base = top + plot_h
        for label, vals in zip(labels, values, strict=True):
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
                    series_colour(label),
                    _bucket_tip(day),
                    label,
                    tip(value),
                )
            )
        if i % label_every == 0 or (i == n - 1 and n <= 10):
            parts.append(
                format_html(
                    '<text class="axis" x="{}" y="{}" text-anchor="middle">{}</text>',
                    f"{left + slot * i + slot / 2:.1f}",
                    height - 10,
                    _bucket_label(day),
                )
            )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # every interpolated value above went through format_html


def _bucket_label(bucket: date) -> str:
    """An axis label: "Mar 10" for a day, "14:00" for an hour (UTC)."""
    if isinstance(bucket, datetime):
        return bucket.astimezone(UTC).strftime("%H:00")
    return bucket.strftime("%b %-d")


def _bucket_tip(bucket: date) -> str:
    if isinstance(bucket, datetime):
        return bucket.astimezone(UTC).strftime("%Y-%m-%d %H:00 UTC")
    return bucket.isoformat()


@register.simple_tag
def legend(series: Sequence[object]) -> SafeString:
    items = "".join(
        format_html(
            '<li><span class="swatch" style="background:{}"></span>{}</li>',
            series_colour(str(getattr(s, "label", ""))),
            getattr(s, "label", ""),
        )
        for s in series
    )
    return mark_safe(f'<ul class="legend">{items}</ul>')  # items are escaped by format_html


@register.filter
def swatch(label: str) -> str:
    return series_colour(str(label))
