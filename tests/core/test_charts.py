"""The usage charts (core/templatetags/dashboard.py): integer ticks for counts, y labels that
fit left of the axis, a colour per series derived from its label, no axes when empty."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta

from core import charts
from core.charts import bucket_label, series_colours
from core.templatetags.dashboard import (
    AXIS_CHAR_WIDTH,
    PALETTE,
    legend,
    series_colour,
    stacked_bar_chart,
)

DAYS = [date(2026, 11, 1) + timedelta(days=i) for i in range(7)]


@dataclass
class S:
    label: str
    cost: list[int]
    tokens: list[int]


def _y_labels(svg: str) -> list[str]:
    return re.findall(
        r'<text class="axis" x="\d+" y="[\d.]+" text-anchor="end">([^<]*)</text>', svg
    )


def test_token_ticks_are_whole_numbers_even_for_tiny_counts() -> None:
    for peak in (1, 2, 3, 5, 7, 13, 999):
        series = [S("a", [0] * 7, [peak] + [0] * 6)]
        labels = _y_labels(stacked_bar_chart(DAYS, series, "tokens", "t"))
        assert len(labels) == 10  # 5 ticks in the wide chart and 5 in the narrow one
        for text in labels:
            assert re.fullmatch(r"\d+(\.\d+)?[kMB]?", text), text
            if not text[-1].isalpha():
                assert "." not in text, (peak, labels)


def test_y_labels_fit_left_of_the_axis() -> None:
    series = [S("a", [7] + [0] * 6, [1] * 7)]  # 7 nano-USD: long labels
    svg = stacked_bar_chart(DAYS, series, "cost", "c")
    labels = _y_labels(svg)
    x_axis = int(re.search(r'<line class="grid" x1="(\d+)"', svg).group(1))  # type: ignore[union-attr]
    assert x_axis - 6 >= AXIS_CHAR_WIDTH * max(len(t) for t in labels)


def test_empty_chart_says_so_without_axes() -> None:
    html = stacked_bar_chart(DAYS, [S("a", [0] * 7, [0] * 7)], "cost", "c")
    assert "No usage in this period" in html
    assert "<svg" not in html and "000000001" not in html
    assert "No usage in this period" in stacked_bar_chart(DAYS, [], "tokens", "t")


def test_colour_follows_the_model_not_its_rank() -> None:
    a = S("anthropic/claude-opus-5-5", [5] * 7, [1] * 7)
    b = S("anthropic/claude-sonnet-5-5", [1] * 7, [1] * 7)
    first = stacked_bar_chart(DAYS, [a, b], "cost", "c")
    second = stacked_bar_chart(DAYS, [b, a], "cost", "c")
    colours = series_colours([a.label, b.label])
    for s in (a, b):
        colour = colours[s.label]
        assert colour in PALETTE
        assert f'fill="{colour}"><title>2026-11-01 · {s.label}' in first
        assert f'fill="{colour}"><title>2026-11-01 · {s.label}' in second
        assert colour in legend([b, a]) and colour in legend([a, b])
    assert series_colour("x") == series_colour("x")
    assert len({series_colour(f"model-{i}") for i in range(40)}) > 4  # spread over the palette


def test_series_of_one_chart_get_distinct_colours() -> None:
    """Issue 34 item 7: opus-5-5 and haiku-5-5 were both orange (a hash mod 8)."""
    opus, haiku = "anthropic/claude-opus-5-5", "anthropic/claude-haiku-5-5"
    labels = [opus, haiku, "anthropic/claude-sonnet-5-5", "anthropic/claude-opus-5"]
    colours = series_colours(labels)
    assert len(set(colours.values())) == len(labels)
    assert colours[opus] != colours[haiku]
    assert series_colours(list(reversed(labels))) == colours  # the set decides, not the order
    many = series_colours([f"key-{i}" for i in range(25)])
    assert len(set(many.values())) == 25  # past the palette too
    svg = stacked_bar_chart(
        DAYS, [S(opus, [5] * 7, [1] * 7), S(haiku, [5] * 7, [1] * 7)], "cost", "c"
    )
    assert f'fill="{colours[opus]}"' in svg and f'fill="{colours[haiku]}"' in svg
    assert colours[opus] in legend([S(opus, [], []), S(haiku, [], [])])


def test_the_latest_bucket_is_labelled_today_and_the_narrow_chart_keeps_the_latest() -> None:
    """Issue 34 item 2: the last bucket always has a label ("Today"), and the phone's chart is
    the latest 7 days, not 30 squeezed or scrolled to the oldest."""
    days = [date(2026, 11, 1) + timedelta(days=i) for i in range(30)]
    html = str(charts.stacked_bars(days, ["m"], [[1] * 30], "tokens", "t", today=days[-1]))
    wide, narrow = html.split("</svg>")[:2]
    assert 'class="chart chart-wide"' in wide and 'class="chart chart-narrow"' in narrow
    assert wide.count("<rect") == 30 and narrow.count("<rect") == 7
    assert narrow.count('class="axis x') <= 4
    for svg in (wide, narrow):
        labels = re.findall(r'<text class="axis x[^"]*"[^>]*>([^<]*)</text>', svg)
        assert labels[-1] == "Today", labels
        assert '<text class="axis x today"' in svg
    assert "2026-11-24" in narrow and "2026-11-23" not in narrow
    assert bucket_label(days[0], today=days[-1]) == "Nov 1"
