"""The one place money becomes text. Pure: no Django, no I/O.

Every surface that shows a price or an amount (/api/models, the dashboard, the admin, the
management API, the CLI, usage records) formats it here, so none of them can print exponent
notation: `str(Decimal("10").normalize())` is "1E+1", which is how "cacheWrite1h": "1E+1" once
reached /api/models. Amounts are exact: prices are integers of micro-USD per million tokens,
costs integers of nano-USD (or pico-USD for one line of an itemised cost), and `scaleb` moves
the decimal point without any rounding.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal

MICRO = -6  # micro-USD → USD
NANO = -9  # nano-USD → USD
PICO = -12  # pico-USD → USD


def plain(amount: Decimal) -> str:
    """The shortest exact decimal: "10", "0.125", "0.01", "-3.5"; never an exponent."""
    if not amount.is_finite():
        raise ValueError(f"not a finite amount: {amount}")
    if amount == 0:
        return "0"  # also for Decimal("-0") and "0E-9"
    return format(amount.normalize(), "f")


def fixed(amount: Decimal, places: int) -> str:
    """Exactly `places` decimals ("15.500000000"), rounded half-even if it has more."""
    if not amount.is_finite():
        raise ValueError(f"not a finite amount: {amount}")
    quantum = Decimal(1).scaleb(-places)
    text = format(amount.quantize(quantum, rounding=ROUND_HALF_EVEN), "f")
    return text[1:] if text.startswith("-") and Decimal(text) == 0 else text


def usd_per_mtok(micro: int) -> str:
    """A price (integer micro-USD per million tokens) as USD per million tokens: "0.125"."""
    return plain(Decimal(micro).scaleb(MICRO))


def usd_from_nano(nano: int, places: int | None = None) -> str:
    """Nano-USD as USD: shortest form by default, or with exactly `places` decimals."""
    amount = Decimal(nano).scaleb(NANO)
    return plain(amount) if places is None else fixed(amount, places)


def usd_from_pico(pico: int) -> str:
    """Pico-USD (a line of an itemised cost: tokens × micro-USD per million) as USD."""
    return plain(Decimal(pico).scaleb(PICO))
