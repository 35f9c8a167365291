"""Admission control. See base.py for the interface; local.py and redis.py implement it."""

from __future__ import annotations

from gateway.limits.base import (
    AdmissionError,
    Admitted,
    AdmitRequest,
    CapacityExhausted,
    InsufficientFunds,
    Limiter,
    LimiterUnavailable,
    RateInfo,
    RateLimited,
)

__all__ = [
    "AdmissionError",
    "AdmitRequest",
    "Admitted",
    "CapacityExhausted",
    "InsufficientFunds",
    "Limiter",
    "LimiterUnavailable",
    "RateInfo",
    "RateLimited",
    "get_limiter",
    "notify_credit",
]


def get_limiter() -> Limiter:  # replaced by the limits work
    raise NotImplementedError


def notify_credit(org_id: int, amount_nano: int) -> None:
    """Tell live limiters about new credit so it is spendable at once (best effort)."""
