"""Admission control. See base.py for the interface; local.py and redis.py implement it
(redis_conn.py holds the Redis limiter's connections)."""

from __future__ import annotations

import threading

from django.conf import settings

from gateway.limits.base import (
    AdmissionError,
    AdmitRequest,
    Admitted,
    CapacityExhausted,
    ConcurrencyLimited,
    FairShareLimited,
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
    "ConcurrencyLimited",
    "FairShareLimited",
    "InsufficientFunds",
    "Limiter",
    "LimiterUnavailable",
    "RateInfo",
    "RateLimited",
    "get_limiter",
    "notify_credit",
    "open_holds_nano",
    "reset_limiter",
]

_limiter: Limiter | None = None
_lock = threading.Lock()


def _redis_prefix() -> str:
    from core.redis_clients import key_prefix

    return key_prefix()


def get_limiter() -> Limiter:
    """The process's limiter: Redis (shared by every process) if REDIS_URL is set, else local."""
    global _limiter
    limiter = _limiter
    if limiter is None:
        with _lock:
            if _limiter is None:
                url = getattr(settings, "REDIS_URL", "")
                if url:
                    from gateway.limits.redis import RedisLimiter

                    _limiter = RedisLimiter(url, prefix=_redis_prefix())
                else:
                    from gateway.limits.local import LocalLimiter

                    _limiter = LocalLimiter()
            limiter = _limiter
    return limiter


def reset_limiter() -> None:
    """Forget the singleton (tests; settings changed). Live holds in a local limiter are lost."""
    global _limiter
    with _lock:
        _limiter = None
    from gateway.limits.redis_conn import close_sync_clients

    close_sync_clients()


def notify_credit(org_id: int, amount_nano: int) -> None:
    """Tell live limiters about new credit so it is spendable at once (best effort).

    Sync: runs in transaction.on_commit after a grant, in whatever process and thread made it.
    With Redis, bumps the org's base if it is loaded (if not, the first admission reads the DB,
    which has the credit). Locally, bumps this process's state if present. Either way the state is
    also marked for a reread, and the periodic reseed heals a lost notification.
    """
    url = getattr(settings, "REDIS_URL", "")
    if url:
        from gateway.limits.redis_conn import notify_credit_redis

        notify_credit_redis(url, _redis_prefix(), org_id, amount_nano)
        return
    from gateway.limits.local import LocalLimiter

    limiter = _limiter
    if isinstance(limiter, LocalLimiter):
        limiter.notify_credit(org_id, amount_nano)


def open_holds_nano(org_id: int) -> int | None:
    """Σ worst-case cost held right now by the org's requests in flight, for dashboard pages
    (sync; never on the request path). With Redis: one HGET of the org's `held` field, shared by
    every gateway process (a crashed request's hold counts until the next admission of the org
    purges it: conservative). In-process: this process's limiter (the embedded single process).
    None when it cannot be read (Redis down): the page then says so instead of guessing.
    """
    url = getattr(settings, "REDIS_URL", "")
    if url:
        from gateway.limits.redis_conn import open_holds_redis

        return open_holds_redis(url, _redis_prefix(), org_id)
    from gateway.limits.local import LocalLimiter

    limiter = _limiter
    if isinstance(limiter, LocalLimiter):
        return limiter.open_holds_now(org_id)
    return 0  # no limiter in this process yet: nothing held here
