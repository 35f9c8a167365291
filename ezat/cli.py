"""Shared argument parsing for the operator commands: clear errors, non-zero exits."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django.core.management.base import CommandError

from accounts.models import Organization
from billing.pricing import usd_to_nano


def parse_usd(value: str, *, what: str, allow_zero: bool = False) -> int:
    """A USD amount as nano-USD. Refuses floats' friends: NaN, infinities, >9 decimals."""
    try:
        amount = Decimal(value.strip())
    except (InvalidOperation, AttributeError) as exc:
        raise CommandError(f"{what}: {value!r} is not a number of USD") from exc
    if not amount.is_finite() or amount < 0 or (amount == 0 and not allow_zero):
        raise CommandError(f"{what}: must be a positive amount of USD, got {value!r}")
    try:
        return usd_to_nano(amount)
    except ValueError as exc:
        raise CommandError(f"{what}: {exc}") from exc


def get_org(name: str) -> Organization:
    try:
        return Organization.objects.get(name=name)
    except Organization.DoesNotExist as exc:
        raise CommandError(f"unknown organization {name!r}") from exc
