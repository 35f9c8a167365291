"""Token prices and costs in integers. Pure: no Django, no I/O.

Catalog prices are exact decimals in USD per million tokens with at most 6 decimals, so a price
is an integer number of micro-USD per million tokens, and a cost in nano-USD is
Σ tokens × price_micro / 1000 — computed exactly in integers and rounded once (half up).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from decimal import Decimal

NANO_PER_USD = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Prices:
    """Micro-USD per million tokens (= pico-USD per token)."""

    input: int
    output: int
    cache_read: int
    cache_write_5m: int
    cache_write_1h: int

    @classmethod
    def from_decimals(
        cls,
        input: Decimal,
        output: Decimal,
        cache_read: Decimal,
        cache_write_5m: Decimal,
        cache_write_1h: Decimal,
    ) -> Prices:
        return cls(
            *(_micro(p) for p in (input, output, cache_read, cache_write_5m, cache_write_1h))
        )

    def as_usd_strings(self) -> dict[str, str]:
        """The prices as kept on a usage record (USD per million tokens)."""
        return dict(_usd_strings(self))  # a copy: the cached one is shared

    @property
    def max_input(self) -> int:
        """The highest price an input token can be billed at (for worst-case holds)."""
        return max(self.input, self.cache_read, self.cache_write_5m, self.cache_write_1h)


@dataclass(frozen=True, slots=True)
class TokenCounts:
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0
    reasoning: int = 0  # part of output, never billed twice


def _micro(price: Decimal) -> int:
    scaled = price * 1_000_000
    if scaled != scaled.to_integral_value():
        raise ValueError(f"price {price} has more than 6 decimals")
    return int(scaled)


@functools.lru_cache(maxsize=1024)
def _usd_strings(prices: Prices) -> dict[str, str]:
    # Cached: Decimal formatting of five prices was ~3 % of a request's CPU, and a catalog has
    # a handful of distinct price sets.
    return {
        "input": _usd(prices.input),
        "output": _usd(prices.output),
        "cacheRead": _usd(prices.cache_read),
        "cacheWrite5m": _usd(prices.cache_write_5m),
        "cacheWrite1h": _usd(prices.cache_write_1h),
    }


def _usd(micro: int) -> str:
    return str((Decimal(micro) / 1_000_000).normalize())


def _round_half_up_div(numerator: int, denominator: int) -> int:
    return (numerator + denominator // 2) // denominator


def cost_nano(tokens: TokenCounts, prices: Prices) -> int:
    pico = (
        tokens.input * prices.input
        + tokens.output * prices.output
        + tokens.cache_read * prices.cache_read
        + tokens.cache_write_5m * prices.cache_write_5m
        + tokens.cache_write_1h * prices.cache_write_1h
    )
    return _round_half_up_div(pico, 1000)


def worst_case_nano(input_tokens: int, max_output_tokens: int, prices: Prices) -> int:
    """What a request can cost at most: every input token at the dearest input price."""
    pico = input_tokens * prices.max_input + max_output_tokens * prices.output
    return -(-pico // 1000)  # ceil: a hold must never be below the real cost


def nano_to_usd(nano: int) -> Decimal:
    return Decimal(nano) / NANO_PER_USD


def usd_to_nano(usd: Decimal) -> int:
    nano = usd * NANO_PER_USD
    if nano != nano.to_integral_value():
        raise ValueError("amounts have at most 9 decimals")
    return int(nano)
