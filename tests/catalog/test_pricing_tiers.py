"""Tiered prices, itemised costs and the one money formatter: pure, integer-exact, to the
nano-dollar. Figures: Claude Haiku 5.5 (https://platform.claude.com/docs/en/models/haiku-5-5/overview)."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog.pricing import (
    Prices,
    PriceSchedule,
    PriceTier,
    TierError,
    TokenCounts,
    check_tier_bounds,
    cost_nano,
    itemise,
    worst_case_nano,
)
from catalog.schema import CatalogDataError, parse_price
from core import money

LOW = Prices(100_000, 500_000, 10_000, 125_000, 200_000)  # micro-USD per million tokens
HIGH = Prices(500_000, 2_500_000, 50_000, 625_000, 1_000_000)
HAIKU = PriceSchedule(version=7, tiers=(PriceTier(100_000, LOW), PriceTier(None, HIGH)))
PLAIN = re.compile(r"^(0|[1-9]\d*)(\.\d*[1-9])?$")


def test_a_request_below_the_threshold_is_billed_at_the_first_tier() -> None:
    tokens = TokenCounts(input=50_000, output=1_000, cache_read=20_000, cache_write_5m=10_000)
    assert tokens.prompt == 80_000
    tier = HAIKU.tier_for(tokens.prompt)
    assert tier.up_to_prompt_tokens == 100_000
    # 50,000 × $0.10 + 1,000 × $0.50 + 20,000 × $0.01 + 10,000 × $0.125, per million tokens:
    # $0.005 + $0.0005 + $0.0002 + $0.00125 = $0.00695 = 6,950,000 nano-USD.
    assert cost_nano(tokens, tier.prices) == 6_950_000


def test_a_request_above_the_threshold_is_billed_at_the_second_tier() -> None:
    tokens = TokenCounts(input=60_000, output=2_001, cache_read=30_000, cache_write_1h=10_001)
    assert tokens.prompt == 100_001
    tier = HAIKU.tier_for(tokens.prompt)
    assert tier.up_to_prompt_tokens is None
    # 60,000 × $0.50 + 2,001 × $2.50 + 30,000 × $0.05 + 10,001 × $1.00 per million:
    # $0.03 + $0.0050025 + $0.0015 + $0.010001 = $0.0465035 = 46,503,500 nano-USD.
    assert cost_nano(tokens, tier.prices) == 46_503_500


def test_the_bound_is_inclusive() -> None:
    assert HAIKU.tier_for(100_000).prices is LOW
    assert HAIKU.tier_for(100_001).prices is HIGH
    assert HAIKU.tier_for(0).prices is LOW


def test_rounding_is_once_half_up() -> None:
    tiny = Prices(1, 1, 1, 1, 1)  # $0.000001 per million tokens: 0.001 nano-USD per token
    assert cost_nano(TokenCounts(input=500), tiny) == 1  # 0.5 nano rounds up
    assert cost_nano(TokenCounts(input=499), tiny) == 0
    assert cost_nano(TokenCounts(input=300, cache_read=200), tiny) == 1  # summed, then rounded


def test_the_hold_uses_the_tier_of_the_worst_case() -> None:
    assert HAIKU.worst_case_nano(90_000, 1_000) == worst_case_nano(90_000, 1_000, LOW)
    assert HAIKU.worst_case_nano(150_000, 1_000) == worst_case_nano(150_000, 1_000, HIGH)
    # Falling prices (not Anthropic's, but allowed): never below what a smaller prompt costs.
    falling = PriceSchedule(version=1, tiers=(PriceTier(10, HIGH), PriceTier(None, LOW)))
    assert falling.worst_case_nano(20, 0) == worst_case_nano(20, 0, HIGH)


@given(
    st.integers(0, 2_000_000),
    st.integers(0, 200_000),
    st.integers(0, 2_000_000),
    st.integers(0, 500_000),
    st.integers(0, 500_000),
)
def test_hold_is_never_below_the_cost(inp: int, out: int, read: int, w5: int, w1: int) -> None:
    tokens = TokenCounts(
        input=inp, output=out, cache_read=read, cache_write_5m=w5, cache_write_1h=w1
    )
    charged = cost_nano(tokens, HAIKU.tier_for(tokens.prompt).prices)
    assert HAIKU.worst_case_nano(tokens.prompt, out) >= charged


@given(st.integers(0, 10**9), st.integers(0, 10**7), st.integers(0, 10**9), st.integers(0, 10**8))
def test_itemised_lines_add_up_to_the_cost(inp: int, out: int, read: int, write: int) -> None:
    tokens = TokenCounts(input=inp, output=out, cache_read=read, cache_write_5m=write)
    items = itemise(tokens, HIGH)
    assert [i.kind for i in items] == [
        "input",
        "output",
        "cacheRead",
        "cacheWrite5m",
        "cacheWrite1h",
    ]
    total = sum(Decimal(money.usd_from_pico(i.amount_pico)) for i in items)
    expected = (total * 10**9).quantize(Decimal(1), rounding="ROUND_HALF_UP")
    assert cost_nano(tokens, HIGH) == int(expected)


@pytest.mark.parametrize(
    ("bounds", "error"),
    [
        ([], "at least one"),
        ([100], "last tier must have no upper bound"),
        ([None, None], "only the last tier may be unbounded"),
        ([100, 100, None], "overlaps"),
        ([200, 100, None], "overlaps"),
        ([0, None], "overlaps"),
    ],
)
def test_tier_bounds_must_partition_prompt_sizes(bounds: list[int | None], error: str) -> None:
    with pytest.raises(TierError, match=error):
        check_tier_bounds(bounds)
    with pytest.raises(TierError):
        PriceSchedule(version=1, tiers=tuple(PriceTier(b, LOW) for b in bounds))


def test_public_tier_shape() -> None:
    assert [t.as_public() for t in HAIKU.tiers] == [
        {
            "upToPromptTokens": 100000,
            "input": "0.1",
            "output": "0.5",
            "cacheRead": "0.01",
            "cacheWrite5m": "0.125",
            "cacheWrite1h": "0.2",
        },
        {
            "upToPromptTokens": None,
            "input": "0.5",
            "output": "2.5",
            "cacheRead": "0.05",
            "cacheWrite5m": "0.625",
            "cacheWrite1h": "1",
        },
    ]


# -- money strings ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("micro", "text"),
    [(10_000_000, "10"), (125_000, "0.125"), (10_000, "0.01"), (1, "0.000001"), (0, "0")],
)
def test_prices_are_plain_decimals(micro: int, text: str) -> None:
    assert money.usd_per_mtok(micro) == text


@given(st.integers(1, 10_000_000_000))  # every price from 0.000001 to 10,000 USD per million
def test_every_price_prints_as_a_plain_exact_decimal(micro: int) -> None:
    text = money.usd_per_mtok(micro)
    assert PLAIN.match(text), text
    assert Decimal(text) * 1_000_000 == micro
    # The catalog file reads it back to the same price, and every shape built from it agrees.
    assert parse_price(text, "p") == Decimal(micro).scaleb(-6)
    prices = Prices(micro, micro, micro, micro, micro)
    assert set(prices.as_usd_strings().values()) == {text}
    assert PriceTier(None, prices).as_public()["cacheWrite1h"] == text


@given(st.integers(-(10**15), 10**15))
def test_amounts_print_plain_and_exact(nano: int) -> None:
    text = money.usd_from_nano(nano)
    assert re.match(r"^-?(0|[1-9]\d*)(\.\d*[1-9])?$", text), text
    assert Decimal(text) == Decimal(nano) / 10**9
    fixed = money.usd_from_nano(nano, 9)
    assert re.match(r"^-?\d+\.\d{9}$", fixed) and Decimal(fixed) == Decimal(nano) / 10**9


def test_small_and_round_amounts_have_no_exponent() -> None:
    assert money.usd_from_nano(100) == "0.0000001"  # str(Decimal) would say 1E-7
    assert money.usd_from_nano(10_000_000_000) == "10"  # normalize() would say 1E+1
    assert money.fixed(Decimal("-0.0000000001"), 9) == "0.000000000"
    assert money.usd_from_pico(1) == "0.000000000001"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", "must not be negative"),
        ("abc", "is not a number"),
        ("NaN", "is not a number"),
        ("1.0000001", "at most 6 decimals"),
        (3.0, "not a float"),
        (True, "not bool"),
        ("100000000", "at most"),
    ],
)
def test_bad_prices_are_refused_naming_the_field(value: object, message: str) -> None:
    with pytest.raises(CatalogDataError, match=f"entry 0.pricing.input: .*{message}"):
        parse_price(value, "entry 0.pricing.input")
