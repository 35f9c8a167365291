"""The usage charts (ezat/templatetags/dashboard.py): integer ticks for counts, y labels that
fit left of the axis, a colour per series derived from its label, no axes when empty."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta

from ezat.templatetags.dashboard import (
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
        assert len(labels) == 5
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
    for s in (a, b):
        colour = series_colour(s.label)
        assert colour in PALETTE
        assert f'fill="{colour}"><title>2026-11-01 · {s.label}' in first
        assert f'fill="{colour}"><title>2026-11-01 · {s.label}' in second
        assert colour in legend([b, a]) and colour in legend([a, b])
    assert series_colour("x") == series_colour("x")
    assert len({series_colour(f"model-{i}") for i in range(40)}) > 4  # spread over the palette
