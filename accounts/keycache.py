"""Per-process cache from an API key's hash to what the hot path needs to know about it.

Entries live EZAT_KEY_CACHE_TTL seconds, so a revocation, a disable or re-enable, an expiry
change, an allow-list change (or a limit change) reaches every process within that time, and a
busy key costs one small query per TTL per process, not one per request.
Unknown-but-well-formed keys are cached as misses too, so a client hammering with a deleted key
cannot hammer the database. A lookup the database cannot answer raises KeyLookupUnavailable
(the gateway answers 503 with `x-should-retry: true`); an entry still within its TTL serves.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django.utils import timezone
from prometheus_client import Counter

from accounts import ip_allow, keys
from core.read_through import ReadThroughCache

LOOKUP_FAILURES = Counter(
    "ezat_key_lookup_failures_total", "Key lookups the database could not answer (503 sent)"
)

MAX_ENTRIES = 50_000
LAST_USED_RESOLUTION = timedelta(minutes=1)


class KeyLookupUnavailable(Exception):
    """The database could not answer a key lookup (not cached, or its entry expired)."""


@dataclass(frozen=True, slots=True)
class KeyInfo:
    id: int
    org_id: int
    prefix: str
    rpm_limit: int
    spend_cap_nano: int | None
    # Requests in flight of the key and of its org (None = no limit).
    key_concurrency: int | None = None
    org_concurrency: int | None = None
    # Lifecycle (issue 19). A disabled, expired or revoked key is cached like a valid one so the
    # gateway can say why it is refused (401). Telling a revoked key from a made-up one reveals
    # nothing (issue 34): the secret has 160+ random bits, nobody guesses a revoked one.
    disabled: bool = False
    expires_at: float | None = None  # epoch seconds; None = never
    # Canonical model ids the key may call; None = every model.
    allowed_models: frozenset[str] | None = None
    spend_cap_period: str = "month"  # "month" | "day" | "total" (gateway.limits.common)
    revoked_at: float | None = None  # epoch seconds; None = not revoked
    # Networks the key may be used from (issue 34); empty = anywhere. Parsed once per TTL.
    allowed_networks: tuple[ip_allow.Network, ...] = ()

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at <= now


def _fetch(key_hash: str) -> KeyInfo | None:
    from accounts.models import ApiKey

    close_old_connections()
    key = (
        ApiKey.objects.filter(key_hash=key_hash)
        .select_related("org")
        .only(
            "id",
            "org_id",
            "prefix",
            "rpm_limit",
            "max_concurrency",
            "spend_cap_nano",
            "spend_cap_period",
            "allowed_models",
            "allowed_ips",
            "expires_at",
            "disabled_at",
            "revoked_at",
            "last_used_at",
            "org__max_concurrency",
        )
        .first()
    )
    if key is None:
        return None
    now = timezone.now()
    refused = (
        key.revoked_at is not None
        or key.disabled_at is not None
        or (key.expires_at is not None and key.expires_at <= now)
    )
    if not refused and (key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION):
        # Piggybacks on the TTL refresh: "last used" is accurate to about a minute, for free.
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return KeyInfo(
        id=key.id,
        org_id=key.org_id,
        prefix=key.prefix,
        rpm_limit=key.rpm_limit or settings.EZAT_DEFAULT_RPM,
        spend_cap_nano=key.spend_cap_nano,
        key_concurrency=key.max_concurrency or settings.EZAT_DEFAULT_KEY_CONCURRENCY or None,
        org_concurrency=key.org.max_concurrency or settings.EZAT_DEFAULT_ORG_CONCURRENCY or None,
        disabled=key.disabled_at is not None,
        expires_at=None if key.expires_at is None else key.expires_at.timestamp(),
        allowed_models=frozenset(key.allowed_models) if key.allowed_models else None,
        spend_cap_period=key.spend_cap_period or "month",
        revoked_at=None if key.revoked_at is None else key.revoked_at.timestamp(),
        allowed_networks=ip_allow.networks(key.allowed_ips or []),
    )


class KeyCache:
    def __init__(self) -> None:
        self._entries: ReadThroughCache[str, KeyInfo | None] = ReadThroughCache(
            _load, lambda: settings.EZAT_KEY_CACHE_TTL, MAX_ENTRIES
        )

    async def lookup(self, secret: str) -> KeyInfo | None:
        if not keys.is_well_formed(secret):
            return None
        try:
            return await self._entries.get(keys.hash_key(secret))
        except DatabaseError as exc:
            # A cached key kept serving until its TTL; past it, the key cannot be checked, and
            # neither a 401 (the key may be good) nor a 500 (not a bug) is the truth: a 503.
            LOOKUP_FAILURES.inc()
            raise KeyLookupUnavailable(str(exc)) from exc

    def clear(self) -> None:
        self._entries.clear()


async def _load(key_hash: str) -> KeyInfo | None:
    return await sync_to_async(_fetch, thread_sensitive=False)(key_hash)


cache = KeyCache()
