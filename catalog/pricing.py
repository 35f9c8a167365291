"""Token prices and costs in integers. Pure: no Django, no I/O.

Here, beside the catalog that holds the prices, and not in `ezat/` (whose shared helpers every
app imports): the USD ⇄ nano-USD conversions are money, in core/money.py.

Catalog prices are exact decimals in USD per million tokens with at most 6 decimals, so a price
is an integer number of micro-USD per million tokens, and a cost in nano-USD is
Σ tokens × price_micro / 1000 — computed exactly in integers and rounded once (half up).

A model's prices form a `PriceSchedule`: one price version (a row id in the catalog, so a usage
record can say which version billed it) with one or more tiers by prompt size. A request is
billed at the tier its actual prompt falls in; the prompt counts input, cache-read and
cache-write tokens (Anthropic's long-context pricing, e.g. Claude Haiku 5.5 above 100,000
tokens: https://platform.claude.com/docs/en/models/haiku-5-5/overview).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from core import money

# The five token kinds of a price, in the order of every table that lists them.
PRICE_KINDS = ("input", "output", "cacheRead", "cacheWrite5m", "cacheWrite1h")


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
        """USD per million tokens as plain decimal strings, keyed by PRICE_KINDS."""
        return dict(_usd_strings(self))  # a copy: the cached one is shared

    def by_kind(self) -> tuple[int, ...]:
        """The five prices in PRICE_KINDS order."""
        return (self.input, self.output, self.cache_read, self.cache_write_5m, self.cache_write_1h)

    @property
    def max_input(self) -> int:
        """The highest price an input token can be billed at (for worst-case holds)."""
        return max(self.input, self.cache_read, self.cache_write_5m, self.cache_write_1h)


@dataclass(frozen=True, slots=True)
class PriceTier:
    """Prices for prompts of up to `up_to_prompt_tokens` tokens (None: no upper bound)."""

    up_to_prompt_tokens: int | None
    prices: Prices

    def as_public(self) -> dict[str, Any]:
        """The tier as /api/models and usage records show it."""
        return dict(_public_tier(self))  # a copy: the cached one is shared


@dataclass(frozen=True, slots=True)
class PriceSchedule:
    """One price version of a model: its tiers, lowest bound first, the last one unbounded."""

    version: int
    tiers: tuple[PriceTier, ...]

    def __post_init__(self) -> None:
        check_tier_bounds([t.up_to_prompt_tokens for t in self.tiers])

    @classmethod
    def flat(cls, prices: Prices, version: int = 0) -> PriceSchedule:
        return cls(version=version, tiers=(PriceTier(None, prices),))

    @property
    def first(self) -> Prices:
        """The first tier's prices: what `pricing` shows for a model."""
        return self.tiers[0].prices

    def tier_for(self, prompt_tokens: int) -> PriceTier:
        """The tier a prompt of this many tokens is billed at (bounds are inclusive)."""
        for tier in self.tiers:
            if tier.up_to_prompt_tokens is None or prompt_tokens <= tier.up_to_prompt_tokens:
                return tier
        raise AssertionError("the last tier is unbounded")  # guaranteed by __post_init__

    def worst_case_nano(self, input_tokens: int, max_output_tokens: int) -> int:
        """What a request with at most `input_tokens` of prompt can cost at most.

        The prompt can land in any tier up to the one of `input_tokens`, so the hold is the
        dearest of those (with rising prices, simply the worst case's own tier): never below
        the real cost, whatever the tiers look like.
        """
        reachable = self.tiers[: self.tiers.index(self.tier_for(input_tokens)) + 1]
        return max(worst_case_nano(input_tokens, max_output_tokens, t.prices) for t in reachable)


class TierError(ValueError):
    """Tier bounds that do not form a partition of all prompt sizes."""


def check_tier_bounds(bounds: list[int | None]) -> None:
    """Bounds must rise strictly and end with None (unbounded); only the last may be None."""
    if not bounds:
        raise TierError("at least one tier is required")
    if bounds[-1] is not None:
        raise TierError("the last tier must have no upper bound (upToPromptTokens: null)")
    previous = 0
    for position, bound in enumerate(bounds[:-1]):
        if bound is None:
            raise TierError(f"tier {position}: only the last tier may be unbounded")
        if bound <= previous:
            raise TierError(
                f"tier {position}: upToPromptTokens {bound} overlaps the tier before it "
                "(bounds must rise strictly and be positive)"
            )
        previous = bound


@dataclass(frozen=True, slots=True)
class TokenCounts:
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0
    reasoning: int = 0  # part of output, never billed twice

    @property
    def prompt(self) -> int:
        """What selects the price tier: input, cache-read and cache-write tokens."""
        return self.input + self.cache_read + self.cache_write_5m + self.cache_write_1h

    def by_kind(self) -> tuple[int, ...]:
        """The five billed counts in PRICE_KINDS order (reasoning is part of output)."""
        return (self.input, self.output, self.cache_read, self.cache_write_5m, self.cache_write_1h)


@dataclass(frozen=True, slots=True)
class CostItem:
    """One line of an itemised cost: tokens × price, exact (pico-USD, not yet rounded)."""

    kind: str
    tokens: int
    price_micro: int
    amount_pico: int


def _micro(price: Decimal) -> int:
    scaled = price * 1_000_000
    if scaled != scaled.to_integral_value():
        raise ValueError(f"price {price} has more than 6 decimals")
    return int(scaled)


@functools.lru_cache(maxsize=1024)
def _usd_strings(prices: Prices) -> dict[str, str]:
    # Cached: formatting five prices was ~3 % of a request's CPU, and a catalog has a handful of
    # distinct price sets.
    return {
        kind: money.usd_per_mtok(p) for kind, p in zip(PRICE_KINDS, prices.by_kind(), strict=True)
    }


@functools.lru_cache(maxsize=1024)
def _public_tier(tier: PriceTier) -> dict[str, Any]:
    return {"upToPromptTokens": tier.up_to_prompt_tokens, **_usd_strings(tier.prices)}


def _round_half_up_div(numerator: int, denominator: int) -> int:
    return (numerator + denominator // 2) // denominator


def itemise(tokens: TokenCounts, prices: Prices) -> list[CostItem]:
    """The lines `cost_nano` adds up, in PRICE_KINDS order."""
    return [
        CostItem(kind, count, price, count * price)
        for kind, count, price in zip(PRICE_KINDS, tokens.by_kind(), prices.by_kind(), strict=True)
    ]


def cost_nano(tokens: TokenCounts, prices: Prices) -> int:
    """Σ of the itemised lines, rounded once (half up) to nano-USD."""
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
