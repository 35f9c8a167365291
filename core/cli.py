"""Shared argument parsing for the operator commands: clear errors, non-zero exits.

Numbers are checked by the parsers themselves (`type=` functions built here), so a bad value is
refused before a command runs, with one line naming the option — never a traceback. Each
parser is tagged `numeric`, which is how tests/foundation/test_cli_numbers.py finds every numeric
option of every command (a new one is covered without editing the test). `main` is manage.py's
entry point: a CommandError raised while parsing (Django only catches the ones raised by
`handle`) becomes that one line and exit status 1.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from django.core.management.base import CommandError

# The largest amount a command takes: far above any real grant, far below what a bigint of
# nano-USD holds (9.2e18 nano ≈ 9.2e9 USD), so a typo cannot overflow the ledger.
MAX_USD = Decimal(1_000_000_000)
MAX_INT = 2**31 - 1  # the columns these numbers go to are 32-bit at most


def _numeric(parser: Callable[[str], Any]) -> Callable[[str], Any]:
    parser.numeric = True  # type: ignore[attr-defined]
    return parser


def positive_int(option: str, *, maximum: int = MAX_INT) -> Callable[[str], int]:
    """A whole number from 1 to `maximum`."""

    def parse(value: str) -> int:
        try:
            number = int(value.strip())
        except ValueError:
            raise CommandError(f"{option}: {value!r} is not an integer") from None
        if number < 1:
            raise CommandError(f"{option}: must be at least 1, got {value!r}")
        if number > maximum:
            raise CommandError(f"{option}: must be at most {maximum}, got {value!r}")
        return number

    return _numeric(parse)


def fraction(option: str, *, minimum: float = 0.01) -> Callable[[str], float]:
    """A share from `minimum` to 1 (a decimal like 0.5)."""

    def parse(value: str) -> float:
        try:
            number = float(value.strip())
        except ValueError:
            raise CommandError(f"{option}: {value!r} is not a number") from None
        if not minimum <= number <= 1:  # also refuses nan and inf
            raise CommandError(f"{option}: must be from {minimum:g} to 1, got {value!r}")
        return number

    return _numeric(parse)


def port(option: str) -> Callable[[str], int]:
    """A TCP port (1-65535), or `auto` for a free one (returned as 0)."""
    whole = positive_int(option, maximum=65535)

    def parse(value: str) -> int:
        if value.strip().lower() == "auto":
            return 0
        return whole(value)

    return _numeric(parse)


def parse_usd(value: str, *, what: str, allow_zero: bool = False) -> int:
    """A USD amount as nano-USD. Refuses floats' friends: exponent notation, NaN, infinities,
    >9 decimals."""
    from core.money import MoneyInputError, parse_amount

    try:
        amount = parse_amount(value)  # plain digits only: "1e3" is refused, not $1,000
    except MoneyInputError as exc:
        raise CommandError(f"{what}: {exc} (USD)") from exc
    if not amount.is_finite() or amount < 0 or (amount == 0 and not allow_zero):
        raise CommandError(f"{what}: must be a positive amount of USD, got {value!r}")
    if amount > MAX_USD:
        raise CommandError(f"{what}: must be at most {MAX_USD} USD, got {value!r}")
    from core.money import usd_to_nano

    try:
        return usd_to_nano(amount)
    except ValueError as exc:
        raise CommandError(f"{what}: {exc}") from exc


def usd(option: str) -> Callable[[str], str]:
    """A positive USD amount (at most 9 decimals), checked; returned as given. The command
    converts it with `parse_usd` in `handle`, so `call_command(..., credit_usd="5")` (whose
    keyword options skip the parser) means the same as the command line."""

    def parse(value: str) -> str:
        parse_usd(value, what=option)
        return value.strip()

    return _numeric(parse)


def main(argv: Sequence[str]) -> None:
    """manage.py: Django's command line, with parse-time CommandErrors as one line."""
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(list(argv))
    except CommandError as exc:
        if "--traceback" in argv:
            raise
        sys.stderr.write(f"CommandError: {exc}\n")
        sys.exit(exc.returncode or 1)
