"""API key format: `ezat_sk_` + 32 base62 chars (≈190 random bits) + 6 base62 checksum chars.

The checksum lets the gateway reject typos and garbage without a database or cache lookup, and
lets secret scanners recognise real keys. Only the SHA-256 of a key is stored.
"""

from __future__ import annotations

import hashlib
import secrets
import string

PREFIX = "ezat_sk_"
MANAGEMENT_PREFIX = "ezat_mk_"
ALPHABET = string.digits + string.ascii_letters
BODY_LENGTH = 32  # 62**32 ≈ 2**190
CHECKSUM_LENGTH = 6
DISPLAY_LENGTH = len(PREFIX) + 6


def _base62(number: int, width: int) -> str:
    chars = []
    for _ in range(width):
        number, rem = divmod(number, 62)
        chars.append(ALPHABET[rem])
    return "".join(reversed(chars))


def _checksum(prefix: str, body: str) -> str:
    digest = hashlib.sha256(f"{prefix}{body}".encode()).digest()
    return _base62(int.from_bytes(digest[:5], "big"), CHECKSUM_LENGTH)


def generate(prefix: str = PREFIX) -> str:
    body = "".join(secrets.choice(ALPHABET) for _ in range(BODY_LENGTH))
    return f"{prefix}{body}{_checksum(prefix, body)}"


def is_well_formed(key: str, prefix: str = PREFIX) -> bool:
    if len(key) != len(prefix) + BODY_LENGTH + CHECKSUM_LENGTH or not key.startswith(prefix):
        return False
    rest = key[len(prefix) :]
    if any(c not in ALPHABET for c in rest):
        return False
    body, check = rest[:BODY_LENGTH], rest[BODY_LENGTH:]
    return secrets.compare_digest(_checksum(prefix, body), check)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def display_prefix(key: str) -> str:
    return key[:DISPLAY_LENGTH]
