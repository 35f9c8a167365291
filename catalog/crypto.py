"""Encryption at rest for provider API keys (Fernet: AES-128-CBC + HMAC-SHA256)."""

from __future__ import annotations

import base64
import hashlib
from functools import cache

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


class ProviderKeyDecryptionError(Exception):
    """The stored key was encrypted with another EZAT_ENCRYPTION_KEY / SECRET_KEY."""


@cache
def _fernet() -> Fernet:
    material = settings.EZAT_ENCRYPTION_KEY or settings.SECRET_KEY
    # Derive a 32-byte key so any string works as material; a dedicated EZAT_ENCRYPTION_KEY lets
    # operators rotate SECRET_KEY without losing provider keys.
    digest = hashlib.sha256(b"ezat-provider-keys:" + material.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise ProviderKeyDecryptionError("cannot decrypt a provider key") from exc


def hint(plaintext: str) -> str:
    """Enough to recognise a key, never enough to use it."""
    return f"…{plaintext[-4:]}" if len(plaintext) >= 12 else "…"
