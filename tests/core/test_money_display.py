"""The dashboard's money, duration and relative-time text (issue 19): one set of rules.

Table tests pin the examples people read; property tests check the rules for every amount:
no exponent notation, one precision per column, and rounding that is exactly half up at the
documented number of places.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core import money

NANO_AMOUNTS = st.integers(min_value=-(10**20), max_value=10**20)
SMALL_AMOUNTS = st.integers(min_value=-999_999_999, max_value=999_999_999)  # under $1


def _value(text: str) -> Decimal:
    """ "−$1,234.50" → Decimal("-1234.50") (the display's own signs and separators)."""
    negative = text.startswith("−")
    body = text.lstrip("−+").removeprefix("$").replace(",", "")
    return -Decimal(body) if negative else Decimal(body)


def _places(text: str) -> int:
    return len(text.partition(".")[2])


@pytest.mark.parametrize(
    ("nano", "expected"),
    [
        (0, "$0.00"),
        (25_000_000_000, "$25.00"),  # the headline balance: never six decimals
        (1_234_567_890_000_000, "$1,234,567.89"),
        (12_345_000_000, "$12.35"),  # half up
        (6_569_000, "$0.006569"),  # under $1: 4 significant digits, not "$0.01"
        (26_100_000, "$0.02610"),
        (500_000_000, "$0.5000"),
        (999_960_000, "$1.00"),  # rounds past a dollar: the 2-decimal rule
        (120, "$0.000000120"),  # 4 significant digits would need 10 places: capped at 9
        (999_950, "$0.001000"),  # rounds up a digit: still 4 significant, not "$0.0010000"
        (1, "$0.000000001"),  # at most nine decimals: amounts are whole nano-USD
        (-6_569_000, "−$0.006569"),
        (-25_000_000_000, "−$25.00"),
    ],
)
def test_total_table(nano: int, expected: str) -> None:
    assert money.usd_total(nano) == expected


@pytest.mark.parametrize(
    ("nano", "expected"),
    [
        (0, "$0.000000"),
        (26_100_000, "$0.026100"),
        (23_369_000, "$0.023369"),
        (7_380_000, "$0.007380"),
        (6_569_499, "$0.006569"),
        (6_569_500, "$0.006570"),  # half up
        (12_000_000_000, "$12.000000"),
    ],
)
def test_per_request_cost_table(nano: int, expected: str) -> None:
    assert money.usd_cost(nano) == expected


def test_signs() -> None:
    assert money.usd_total(5_000_000_000, sign=True) == "+$5.00"
    assert money.usd_total(0, sign=True) == "$0.00"
    assert money.usd_cost(-1_000, sign=True) == "−$0.000001"


def test_the_issue_column_reads_in_one_precision() -> None:
    """The column from the report: $0.0261, $0.023369, $0.00738 and $0.00."""
    column = [money.usd_cost(n) for n in (26_100_000, 23_369_000, 7_380_000, 0)]
    assert column == ["$0.026100", "$0.023369", "$0.007380", "$0.000000"]
    assert money.usd_column([25_000_000_000, -6_569_000], sign=True) == [
        "+$25.000000",
        "−$0.006569",
    ]


@given(NANO_AMOUNTS)
def test_no_exponent_ever(nano: int) -> None:
    for text in (money.usd_total(nano), money.usd_cost(nano), money.usd_total(nano, sign=True)):
        assert "e" not in text.lower()
        assert text.lstrip("−+").startswith("$")


@given(NANO_AMOUNTS)
def test_total_rounding_is_exact(nano: int) -> None:
    """The shown value is the amount rounded half up at the shown places, and the places
    follow the rule: 2 at or above $1 (and for 0), else 4 significant digits (≤ 9 places)."""
    amount = Decimal(nano).scaleb(-9)
    text = money.usd_total(nano)
    places = _places(text)
    quantum = Decimal(1).scaleb(-places)
    assert _value(text) == amount.quantize(quantum, rounding=ROUND_HALF_UP)
    if abs(_value(text)) >= 1 or nano == 0:
        assert places == 2
    else:
        digits = _value(text).copy_abs().normalize()
        significant = len(format(abs(_value(text)), "f").replace(".", "").lstrip("0"))
        assert significant == 4 or places == 9, (text, digits)


@given(SMALL_AMOUNTS.filter(lambda n: n != 0))
def test_under_a_dollar_keeps_four_significant_digits(nano: int) -> None:
    text = money.usd_total(nano)
    value = abs(_value(text))
    if value < 1:
        fraction = text.partition(".")[2]
        assert len(fraction.lstrip("0")) == 4 or len(fraction) == 9
        assert value != 0  # never rounds a real amount to "$0.00"


@given(NANO_AMOUNTS)
def test_cost_rounding_is_exact(nano: int) -> None:
    text = money.usd_cost(nano)
    assert _places(text) == 6
    amount = Decimal(nano).scaleb(-9)
    assert _value(text) == amount.quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)


@given(st.lists(NANO_AMOUNTS, min_size=1, max_size=30))
def test_a_column_has_one_precision(nanos: list[int]) -> None:
    for column in (money.usd_column(nanos), money.usd_column(nanos, sign=True)):
        assert len({_places(text) for text in column}) == 1
        assert all("e" not in text.lower() for text in column)
        # Each cell still shows at least the precision its own rule asks for.
        assert _places(column[0]) >= max(money.total_places(n) for n in nanos)
    costs = [money.usd_cost(n) for n in nanos]
    assert len({_places(text) for text in costs}) == 1


@pytest.mark.parametrize(
    ("ms", "expected"),
    [
        (None, "—"),
        (0, "0 ms"),
        (420, "420 ms"),
        (999.4, "999 ms"),
        (999.6, "1.0 s"),  # never "1000 ms"
        (1000, "1.0 s"),
        (11509, "11.5 s"),  # the issue's "11509 ms"
        (59_949, "59.9 s"),
        (75_000, "1 min 15 s"),
    ],
)
def test_duration(ms: float | None, expected: str) -> None:
    assert money.duration(ms) == expected


@given(st.integers(min_value=1000, max_value=59_949))
def test_seconds_have_one_decimal(ms: int) -> None:
    text = money.duration(ms)
    assert text.endswith(" s") and "ms" not in text
    assert Decimal(text.removesuffix(" s")) == (Decimal(ms) / 1000).quantize(
        Decimal("0.1"), rounding=ROUND_HALF_UP
    )


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (-3, "just now"),  # a clock a little ahead
        (0, "just now"),  # never "0 minutes ago"
        (59.9, "just now"),
        (60, "1 minute ago"),
        (150, "2 minutes ago"),
        (3600, "1 hour ago"),
        (7200, "2 hours ago"),
        (86400 * 3 + 5, "3 days ago"),
    ],
)
def test_ago(seconds: float, expected: str) -> None:
    assert money.ago(seconds) == expected
