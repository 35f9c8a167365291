"""The one place money becomes text. Pure: no Django, no I/O.

Every surface that shows a price or an amount (/api/models, the dashboard, the admin, the
management API, the CLI, usage records) formats it here, so none of them can print exponent
notation: `str(Decimal("10").normalize())` is "1E+1", which is how "cacheWrite1h": "1E+1" once
reached /api/models. Amounts are exact: prices are integers of micro-USD per million tokens,
costs integers of nano-USD (or pico-USD for one line of an itemised cost), and `scaleb` moves
the decimal point without any rounding.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal

MICRO = -6  # micro-USD → USD
NANO = -9  # nano-USD → USD
PICO = -12  # pico-USD → USD
NANO_PER_USD = 1_000_000_000


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


# --- Display: the dashboard's one set of money rules (issue 19) --------------------------------
# Balances and totals: 2 decimals; under $1, 4 significant digits (so $0.006569 spent does not
# read "$0.01"); per-request costs: always 6 decimals, so a column of them has one precision and
# a live row matches the rows the page rendered. Rounding is half up, as people round by hand.
# Nothing here can produce exponent notation: every string comes from format(Decimal, "f").

TOTAL_PLACES = 2
SIGNIFICANT_UNDER_ONE = 4
COST_PLACES = 6
MAX_PLACES = 9  # amounts are integers of nano-USD: more decimals would only add zeros


def _display(amount: Decimal, places: int) -> str:
    quantum = Decimal(1).scaleb(-places)
    text = format(amount.quantize(quantum, rounding=ROUND_HALF_UP), "f")
    whole, _, frac = text.lstrip("-").partition(".")
    grouped = f"{int(whole):,}"
    body = f"${grouped}.{frac}" if frac else f"${grouped}"
    return body


def total_places(nano: int) -> int:
    """Decimals a balance or total of `nano` shows: 2, or enough for 4 significant digits."""
    amount = abs(Decimal(int(nano)).scaleb(NANO))
    if amount == 0 or amount >= 1:
        return TOTAL_PLACES
    # adjusted() is the exponent of the leading digit: 0.006569 → -3 → 3 + 4 - 1 = 6 places.
    places = min(MAX_PLACES, max(TOTAL_PLACES, SIGNIFICANT_UNDER_ONE - 1 - amount.adjusted()))
    rounded = amount.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    if rounded >= 1:  # 0.99996 rounds to 1.000: past a dollar the 2-decimal rule applies
        return TOTAL_PLACES
    if rounded.adjusted() > amount.adjusted():  # 0.00099995 → 0.001000, not 0.0010000
        return max(TOTAL_PLACES, places - 1)
    return places


def _signed(nano: int, body: str, sign: bool) -> str:
    if nano < 0:
        return f"−{body}"  # U+2212: the typographic minus (does not wrap away from the digits)
    return f"+{body}" if sign and nano else body


def usd_total(nano: int, *, sign: bool = False, places: int | None = None) -> str:
    """A balance or total: "$1,234.50", "$0.006569", "$0.5000", "$0.00"."""
    nano = int(nano)
    chosen = total_places(nano) if places is None else places
    return _signed(nano, _display(abs(Decimal(nano).scaleb(NANO)), chosen), sign)


def usd_cost(nano: int, *, sign: bool = False) -> str:
    """A per-request cost, always 6 decimals: "$0.026100", "$0.000000"."""
    nano = int(nano)
    return _signed(nano, _display(abs(Decimal(nano).scaleb(NANO)), COST_PLACES), sign)


def usd_column(nanos: list[int], *, sign: bool = False) -> list[str]:
    """Totals that share a column: one precision for all, the most any of them needs."""
    places = max((total_places(n) for n in nanos), default=TOTAL_PLACES)
    return [usd_total(n, sign=sign, places=places) for n in nanos]


# --- Issue 34: every surface reads an amount by the same rule ------------------------------
# The rule, by what the amount is (never by what shares its column or page):
#   - a per-request cost (a log row, a receipt and its lines, a hold, a request's ledger entry,
#     the Playground, the CSV): 6 decimals, usd_cost / cost_number / usd_cost_pico;
#   - a balance or a total: usd_total (2 decimals; under $1, 4 significant digits);
#   - a spend cap: usd_cap, the amount as the owner typed it ("$5 / month", "$0.0001 / day");
#   - negatives with the typographic minus before the "$": "−$0.003193".
# Widening a column to its neighbours' precision was issue 19's answer, and it made a $5 cap read
# "$5.0000000 / month" beside a $0.0001 one: the same amount must read the same everywhere.

CAP_PERIOD_TEXT = {"month": "month", "day": "day", "total": "total"}


def cost_number(nano: int) -> str:
    """A per-request cost as a plain number for machines (CSV, JSON): "0.000930", "-0.003193".

    The display rule's 6 decimals and rounding, without the "$" and with an ASCII minus, so a
    spreadsheet parses it and it still matches the page digit for digit."""
    nano = int(nano)
    body = _display(abs(Decimal(nano).scaleb(NANO)), COST_PLACES).removeprefix("$").replace(",", "")
    return f"-{body}" if nano < 0 and Decimal(body) != 0 else body


def usd_cost_pico(pico: int) -> str:
    """A line of an itemised receipt (pico-USD) by the per-request rule: "$0.006900"."""
    pico = int(pico)
    amount = abs(Decimal(pico).scaleb(PICO))
    return _signed(pico, _display(amount, COST_PLACES), False)


def cap_amount(nano: int) -> str:
    """A spend cap's amount: whole dollars without decimals ("$5"), otherwise cents at least
    and every digit the owner set ("$2.50", "$0.0001"). Caps are set by hand, so they are shown
    exactly as set, never rounded."""
    nano = int(nano)
    amount = abs(Decimal(nano).scaleb(NANO))
    if amount == amount.to_integral_value():
        body = f"${int(amount):,}"
    else:
        exact = plain(amount)
        whole, _, frac = exact.partition(".")
        body = f"${int(whole):,}.{frac.ljust(TOTAL_PLACES, '0')}"
    return _signed(nano, body, False)


def usd_cap(nano: int | None, period: str = "month") -> str:
    """A spend cap with its period: "$5 / month", "$0.0001 / day", "$20 / total"; "none"."""
    if nano is None:
        return "none"
    return f"{cap_amount(nano)} / {CAP_PERIOD_TEXT.get(period, period)}"


# --- Durations and relative times -----------------------------------------------------------


def duration(ms: int | float | None) -> str:
    """Milliseconds for people: "850 ms" under a second, "11.5 s" from one second on."""
    if ms is None:
        return "—"
    value = Decimal(str(ms))
    whole_ms = value.quantize(Decimal(1), rounding=ROUND_HALF_UP)
    if whole_ms < 1000:  # 999.6 ms rounds to a second and reads "1.0 s", not "1000 ms"
        return f"{whole_ms} ms"
    seconds = value.scaleb(-3).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
    if seconds < 60:
        return f"{seconds} s"
    whole = int(seconds.quantize(Decimal(1), rounding=ROUND_HALF_UP))
    return f"{whole // 60} min {whole % 60} s"


def ago(seconds: float) -> str:
    """How long ago, for people: "just now" under a minute, then minutes, hours, days."""
    s = max(0, int(seconds))
    if s < 60:
        return "just now"
    for size, unit in ((86400, "day"), (3600, "hour"), (60, "minute")):
        if s >= size:
            n = s // size
            return f"{n} {unit}{'' if n == 1 else 's'} ago"
    return "just now"  # unreachable: s >= 60 matched "minute"


# --- Input: the one parser of amounts people type (issue 33) -----------------------------------
# `Decimal("1e3")` is 1000: an amount typed as "1e3" (or pasted from a spreadsheet as "1E-9")
# would grant $1,000. Every money input (the CLI, the admin, the dashboard, the management API)
# reads its text here first, so exponent notation is refused everywhere with the same words.

_PLAIN_AMOUNT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")


class MoneyInputError(ValueError):
    """Text that is not a plain decimal amount; the message says why, for the person typing."""


class ExponentNotation(MoneyInputError):
    """A number, but written with an exponent ("1e3"): refused, never read as 1000."""


def parse_amount(text: str) -> Decimal:
    """A plain decimal ("1000", "0.25", ".5", "-3"): digits, at most one point, an optional sign.
    Exponent notation, NaN, infinities, spaces inside and thousands separators are refused;
    bounds and decimals are the caller's (they differ per input)."""
    value = str(text).strip()
    if _PLAIN_AMOUNT.fullmatch(value):
        return Decimal(value)
    if re.fullmatch(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)[eE][+-]?\d{1,6}", value):
        amount = Decimal(value)
        # The plain form as an example, when it is short enough to be one.
        example = f" (e.g. {plain(amount)})" if -12 <= amount.adjusted() <= 12 else ""
        raise ExponentNotation(
            f"{value!r} uses exponent notation: write the amount in plain digits{example}"
        )
    raise MoneyInputError(f"{value!r} is not a number: use digits and at most one decimal point")


def nano_to_usd(nano: int) -> Decimal:
    return Decimal(nano).scaleb(NANO)


def usd_to_nano(usd: Decimal) -> int:
    """Exact: an amount with more than 9 decimals is refused, never rounded."""
    nano = usd * NANO_PER_USD
    if nano != nano.to_integral_value():
        raise ValueError("amounts have at most 9 decimals")
    return int(nano)
