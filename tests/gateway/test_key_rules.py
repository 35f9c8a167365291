"""The key rules the gateway applies per request (issue 19): allow-list and expiry, pure."""

from __future__ import annotations

from accounts.keycache import KeyInfo
from gateway.chain import check_allowed, key_allows, not_allowed

BASE = {"id": 1, "org_id": 1, "prefix": "ezat_sk_x", "rpm_limit": 10, "spend_cap_nano": None}


def test_no_allow_list_allows_every_model() -> None:
    key = KeyInfo(**BASE)
    assert key_allows(key, "anthropic/claude-opus-5-5")
    check_allowed(key, "anything/at-all", "anything")


def test_allow_list_allows_only_its_models() -> None:
    key = KeyInfo(**BASE, allowed_models=frozenset({"b/two", "a/one"}))
    assert key_allows(key, "a/one") and not key_allows(key, "c/three")
    err = not_allowed(key, "claude-three")
    assert (err.status, err.type, err.param) == (403, "permission_error", "model")
    assert "`claude-three`" in err.message and "a/one, b/two" in err.message


def test_expiry() -> None:
    assert not KeyInfo(**BASE).expired(10**12)
    key = KeyInfo(**BASE, expires_at=100.0)
    assert not key.expired(99.9)
    assert key.expired(100.0) and key.expired(101)
