"""Webhook signatures (pure): HMAC-SHA256 over "<timestamp>.<body>" with the org's secret.

Headers on every delivery (documented in docs/features.md, "Alerts"):
    X-EZAT-Timestamp: <unix seconds>
    X-EZAT-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + raw body)>
A receiver recomputes the HMAC over the raw body bytes, compares in constant time, and refuses
timestamps older than a few minutes (replays).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

TIMESTAMP_HEADER = "X-EZAT-Timestamp"
SIGNATURE_HEADER = "X-EZAT-Signature"
EVENT_HEADER = "X-EZAT-Event"
DELIVERY_HEADER = "X-EZAT-Delivery"
SECRET_PREFIX = "whsec_"
DEFAULT_TOLERANCE_S = 300


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def signed_headers(secret: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: signature(secret, timestamp, body),
    }


def verify(
    secret: str,
    body: bytes,
    timestamp_header: str,
    signature_header: str,
    *,
    now: float,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
) -> bool:
    """What a receiver does (and what the tests do with a real receiver)."""
    try:
        timestamp = int(timestamp_header)
    except ValueError:
        return False
    if abs(now - timestamp) > tolerance_s:
        return False
    return hmac.compare_digest(signature(secret, timestamp, body), signature_header)
