"""The one parser of typed amounts (core/money.py `parse_amount`, issue 33): plain digits only,
so "1e3" can never mean 1000 on any money input."""

from __future__ import annotations

from decimal import Decimal

import pytest

from core.money import ExponentNotation, MoneyInputError, parse_amount


@pytest.mark.parametrize(
    ("text", "value"),
    [("1000", "1000"), ("0.25", "0.25"), (".5", "0.5"), (" 2 ", "2"), ("-3", "-3"), ("1.", "1")],
)
def test_plain_amounts(text: str, value: str) -> None:
    assert parse_amount(text) == Decimal(value)


@pytest.mark.parametrize("text", ["1e3", "1E-9", "2.5e+2", "-1e30", "1e999999"])
def test_exponent_notation_is_refused_with_the_plain_form(text: str) -> None:
    with pytest.raises(ExponentNotation, match="exponent notation"):
        parse_amount(text)


def test_the_refusal_shows_the_plain_form() -> None:
    with pytest.raises(ExponentNotation, match=r"e\.g\. 1000\)"):
        parse_amount("1e3")


@pytest.mark.parametrize("text", ["", "abc", "NaN", "Infinity", "1,000", "1 000", "$5", "0x10"])
def test_anything_else_is_not_a_number(text: str) -> None:
    with pytest.raises(MoneyInputError, match="not a number"):
        parse_amount(text)
