"""Template filters for money and tokens, and the tags of the server-rendered SVG usage charts
(drawn by core/charts.py)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django import template
from django.utils import timezone
from django.utils.safestring import SafeString

from core import charts, money

register = template.Library()

PALETTE = charts.PALETTE
AXIS_CHAR_WIDTH = charts.AXIS_CHAR_WIDTH
compact = charts.compact


def format_usd(nano: int | None, *, sign: bool = False) -> str:
    """A balance or total (core.money.usd_total): 2 decimals; under $1, 4 significant digits."""
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


@register.filter
def percent(ratio: Decimal | None) -> str:
    """0.8512 → "85.1 %" (half up); None → "—"."""
    if ratio is None:
        return "—"
    return f"{(ratio * 100).quantize(Decimal('0.1'), rounding=ROUND_HALF_UP)} %"


@register.filter
def tokens(number: int | None) -> str:
    return "—" if number is None else compact(number)


@register.simple_tag
def stacked_bar_chart(
    days: Sequence[date], series: Sequence[object], metric: str, title: str
) -> SafeString:
    """Bars per bucket, stacked by series (core/charts.py). `metric` is "cost" (nano-USD) or
    "tokens". Buckets are UTC days (dates) or, for the last 24 hours, UTC hours."""
    labels = [str(getattr(s, "label", "")) for s in series]
    values = [list(getattr(s, metric)) for s in series]
    return charts.stacked_bars(days, labels, values, metric, title, timezone.now().date())


@register.simple_tag
def key_spend_chart(spend: Any, title: str) -> SafeString:
    """A key's spend per day (what its cap counted), with the cap as a dashed line. `spend` is
    a billing.key_spend.KeySpend, duck-typed: ezat's core does not import billing."""
    key = spend.key
    cap = key.spend_cap_nano
    text = f"cap {money.usd_cap(cap, key.spend_cap_period)}" if cap is not None else ""
    return charts.stacked_bars(
        spend.days,
        [str(spend.label)],
        [list(spend.counted_nano)],
        "cost",
        title,
        timezone.now().date(),
        cap=cap,
        cap_text=text,
    )


@register.simple_tag
def legend(series: Sequence[object]) -> SafeString:
    return charts.legend_html([str(getattr(s, "label", "")) for s in series])


@register.simple_tag
def swatch_in(label: str, series: Sequence[object]) -> str:
    """The colour of `label` in the chart of `series` (distinct within that chart)."""
    colours = charts.series_colours([str(getattr(s, "label", "")) for s in series])
    return colours.get(str(label), charts.PALETTE[charts.preferred_colour(str(label))])


def series_colour(label: str) -> str:
    """A label's usual colour (its preferred palette slot), before distinct assignment."""
    return charts.PALETTE[charts.preferred_colour(label)]
