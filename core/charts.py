"""The dashboard's stacked bar charts, drawn server-side as SVG (no JavaScript library, no CDN;
a screenshot or a no-JS browser sees the same picture). Pure: the caller passes "today".

Each chart is drawn twice (issue 34): a wide one of every bucket, and a narrow one of the latest
buckets that CSS shows instead on a phone. A 1000-unit chart squeezed into a 340 px box had
unreadable text, and scrolled it opened at the oldest day, so today's spend was off-screen.
The last bucket always carries an axis label, "Today" when it is today.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from core import money

# Distinguishable on white and for common colour-vision deficiencies (Okabe–Ito-like), then two
# more so that ten series in one chart still get ten colours.
PALETTE = (
    "#2563eb",
    "#e69f00",
    "#009e73",
    "#cc79a7",
    "#56b4e9",
    "#d55e00",
    "#7c3aed",
    "#6b7280",
    "#0f766e",
    "#be123c",
)

# Axis text is 11 px on a desktop, 14 user units in the narrow chart (dashboard.css); a label's
# width is budgeted at 10 user units per character so the longest one fits left of the axis.
AXIS_CHAR_WIDTH = 10
WIDE = (1000, 280, 10)  # width, height (user units), at most this many x labels
NARROW = (400, 260, 4)
NARROW_DAYS = 7
NARROW_HOURS = 8


def preferred_colour(label: str) -> int:
    """The palette slot a label asks for, derived from the label alone (issue 19: a model keeps
    its colour from page to page and load to load, whatever its rank)."""
    digest = hashlib.blake2s(label.encode(), digest_size=2).digest()
    return int.from_bytes(digest, "big") % len(PALETTE)


def series_colours(labels: Sequence[str]) -> dict[str, str]:
    """A distinct colour for every label of one chart (issue 34: opus-5-5 and haiku-5-5 were
    both orange, a hash mod 8). Labels take their preferred slot in sorted order, and one whose
    slot is taken moves to the next free slot, so the answer depends only on the set of labels
    (the same in a chart, its legend and its table) and most labels keep their usual colour.
    Past the palette, golden-angle hues keep colours apart."""
    taken: dict[int, str] = {}
    out: dict[str, str] = {}
    extra = 0
    for label in sorted(set(labels)):
        slot = preferred_colour(label)
        for step in range(len(PALETTE)):
            candidate = (slot + step) % len(PALETTE)
            if candidate not in taken:
                taken[candidate] = label
                out[label] = PALETTE[candidate]
                break
        else:
            out[label] = f"hsl({(extra * 137.508) % 360:.0f} 65% 40%)"
            extra += 1
    return out


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


def _ceiling(peak: float, *, integer: bool) -> float:
    """The top gridline. Counts (tokens) get integer quarter ticks: the top is 4 × a whole
    step, never 0.25 tokens."""
    if not integer:
        return _nice_ceiling(peak)
    step = max(1, math.ceil(_nice_ceiling(peak / 4)))
    return float(step * 4)


def usd_axis(nano: float) -> str:
    usd_value = Decimal(str(nano)) / 1_000_000_000
    if usd_value == 0:
        return "$0"
    text = f"{usd_value:f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"${text}"


def compact(number: float) -> str:
    """1234 → 1.2k, 5_600_000 → 5.6M: axis labels and chart tooltips."""
    value = float(number)
    for threshold, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= threshold:
            scaled = value / threshold
            return f"{scaled:.1f}".rstrip("0").rstrip(".") + suffix
    return f"{value:.0f}" if value == int(value) else f"{value:.2g}"


def bucket_label(bucket: date, today: date | None = None) -> str:
    """An axis label: "Mar 10" for a day ("Today" for today), "14:00" for an hour (UTC)."""
    if isinstance(bucket, datetime):
        return bucket.astimezone(UTC).strftime("%H:00")
    if today is not None and bucket == today:
        return "Today"
    return bucket.strftime("%b %-d")


def bucket_tip(bucket: date) -> str:
    if isinstance(bucket, datetime):
        return bucket.astimezone(UTC).strftime("%Y-%m-%d %H:00 UTC")
    return bucket.isoformat()


@dataclass(frozen=True)
class Chart:
    buckets: Sequence[date]
    labels: Sequence[str]
    values: Sequence[Sequence[int]]  # per series, per bucket
    metric: str  # "cost" (nano-USD) or "tokens"
    title: str
    colours: dict[str, str]
    today: date
    cap: int | None = None  # a spend cap (nano-USD): a dashed line at its height
    cap_text: str = ""


def _svg(chart: Chart, width: int, height: int, max_labels: int, css: str) -> str:
    fmt: Callable[[float], str] = usd_axis if chart.metric == "cost" else compact
    # A bar's tooltip is an amount, so it reads like every other total (core.money).
    tip: Callable[[float], str] = (
        (lambda v: money.usd_total(int(v))) if chart.metric == "cost" else compact
    )
    n = max(len(chart.buckets), 1)
    totals = [sum(v[i] for v in chart.values) for i in range(len(chart.buckets))]
    peak = max([*totals, chart.cap or 0, 1])
    ceiling = _ceiling(peak, integer=chart.metric != "cost")
    ticks = [fmt(ceiling * i / 4) for i in range(5)]
    right, top, bottom = 12, 12, 30
    left = max(48, 12 + AXIS_CHAR_WIDTH * max(len(t) for t in ticks))
    plot_w, plot_h = width - left - right, height - top - bottom
    parts: list[str] = [
        format_html(
            '<svg class="{}" viewBox="0 0 {} {}" role="img" aria-label="{}" '
            'xmlns="http://www.w3.org/2000/svg" preserveAspectRatio="xMidYMid meet">',
            css,
            width,
            height,
            chart.title,
        ),
        format_html("<title>{}</title>", chart.title),
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
    if chart.cap is not None:
        y = top + plot_h - plot_h * chart.cap / ceiling
        parts.append(
            format_html(
                '<line class="cap" x1="{}" x2="{}" y1="{}" y2="{}"/>'
                '<text class="axis cap-label" x="{}" y="{}" text-anchor="end">{}</text>',
                left,
                width - right,
                f"{y:.1f}",
                f"{y:.1f}",
                width - right,
                f"{max(y - 5, 11):.1f}",
                chart.cap_text,
            )
        )
    slot = plot_w / n
    bar = max(min(slot * 0.72, 48), 1)
    label_every = max(1, math.ceil(n / max_labels))
    for i, bucket in enumerate(chart.buckets):
        x = left + slot * i + (slot - bar) / 2
        base = top + plot_h
        for label, vals in zip(chart.labels, chart.values, strict=True):
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
                    chart.colours[label],
                    bucket_tip(bucket),
                    label,
                    tip(value),
                )
            )
        # Counted from the last bucket, so the latest (today) is always labelled.
        if (n - 1 - i) % label_every == 0:
            last = i == n - 1
            parts.append(
                format_html(
                    '<text class="{}" x="{}" y="{}" text-anchor="{}">{}</text>',
                    "axis x today" if last and bucket_label(bucket, chart.today) == "Today"
                    else "axis x",
                    f"{(left + slot * i + slot) if last else (left + slot * i + slot / 2):.1f}",
                    height - 10,
                    "end" if last else "middle",  # the last label ends at the plot's edge
                    bucket_label(bucket, chart.today),
                )
            )  # fmt: skip
    parts.append("</svg>")
    return "".join(parts)


def stacked_bars(
    buckets: Sequence[date],
    labels: Sequence[str],
    values: Sequence[Sequence[int]],
    metric: str,
    title: str,
    today: date,
    cap: int | None = None,
    cap_text: str = "",
) -> SafeString:
    """The wide chart and the narrow one (the latest days or hours), or a message when empty."""
    totals = [sum(v[i] for v in values) for i in range(len(buckets))]
    if max(totals, default=0) == 0 and cap is None:
        # No axes to misread: just the message (issue 19).
        return format_html(
            '<p class="chart-empty muted" role="img" aria-label="{}">No usage in this period</p>',
            title,
        )
    colours = series_colours(labels)
    chart = Chart(buckets, labels, values, metric, title, colours, today, cap, cap_text)
    hourly = bool(buckets) and isinstance(buckets[0], datetime)
    keep = NARROW_HOURS if hourly else NARROW_DAYS
    latest = Chart(
        buckets[-keep:],
        labels,
        [v[-keep:] for v in values],
        metric,
        f"{title} (latest {'hours' if hourly else 'days'})",
        colours,
        today,
        cap,
        cap_text,
    )
    wide = _svg(chart, *WIDE, css="chart chart-wide")
    if any(any(v) for v in latest.values) or cap is not None:
        narrow = _svg(latest, *NARROW, css="chart chart-narrow")
    else:
        narrow = format_html(
            '<p class="chart-empty chart-narrow muted">No usage in the latest {}</p>',
            "hours" if hourly else "days",
        )
    return mark_safe(wide + narrow)  # every interpolated value went through format_html


def legend_html(labels: Sequence[str]) -> SafeString:
    colours = series_colours(labels)
    items = "".join(
        format_html(
            '<li><span class="swatch" style="background:{}"></span>{}</li>', colours[label], label
        )
        for label in labels
    )
    return mark_safe(f'<ul class="legend">{items}</ul>')  # items are escaped by format_html
