"""Sealed reasoning: a signed thinking block a stateless client carries between turns.

The Responses API's `encrypted_content` holds the exact thinking block Anthropic signed, so the
next turn can hand it back (Anthropic requires it in a tool loop with thinking) with no state on
any gateway replica. The block is sealed with AES-256-GCM (AEAD, `cryptography`), under a key
derived with HKDF-SHA256 from the gateway's key material (EZAT_ENCRYPTION_KEY, else SECRET_KEY,
as for provider keys at rest). The org and the canonical model are the associated data: a blob
opens only for the org and model that produced it, and any change to it fails authentication.

Format: "ezr1." + base64url(nonce[12] || ciphertext+tag). A random 96-bit nonce per seal; at
2^32 seals per key the collision risk stays below NIST's bound for GCM.
"""

from __future__ import annotations

import base64
import binascii
import os
from functools import cache
from typing import Any

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

from gateway.protocols.openai.types import InvalidRequest

PREFIX = "ezr1."
NONCE_BYTES = 12
MAX_BLOB_CHARS = 4 * 1024 * 1024  # a thinking block is large, but never this large


@cache
def _aead() -> AESGCM:
    material = (settings.EZAT_ENCRYPTION_KEY or settings.SECRET_KEY).encode()
    key = HKDF(
        algorithm=hashes.SHA256(),
        length=32,
        salt=b"ezat-sealed-reasoning",
        info=b"ezat responses encrypted_content v1",
    ).derive(material)
    return AESGCM(key)


def _associated(org_id: int, model_id: str) -> bytes:
    return f"org={org_id}\x1fmodel={model_id}".encode()


class Sealer:
    """Seal and open thinking blocks for one org and model (one per request)."""

    __slots__ = ("_ad",)

    def __init__(self, org_id: int, model_id: str) -> None:
        self._ad = _associated(org_id, model_id)

    def seal(self, block: dict[str, Any]) -> str:
        nonce = os.urandom(NONCE_BYTES)
        sealed = _aead().encrypt(nonce, orjson.dumps(block), self._ad)
        return PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")

    def open(self, blob: str, param: str) -> dict[str, Any]:
        """The block sealed in `blob`; a 400 naming `param` if it is not one of ours for this
        org and model, or was changed."""
        if not blob.startswith(PREFIX) or len(blob) > MAX_BLOB_CHARS:
            raise _refused(param, "is not reasoning content this gateway produced")
        data = blob[len(PREFIX) :]
        try:
            raw = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
        except (binascii.Error, ValueError):
            raise _refused(param, "is malformed (not base64url)") from None
        if len(raw) <= NONCE_BYTES + 16:
            raise _refused(param, "is malformed (too short)")
        try:
            plain = _aead().decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], self._ad)
        except InvalidTag:
            raise _refused(
                param,
                "could not be opened: it was produced for another organization or model, or "
                "it was changed",
            ) from None
        block = orjson.loads(plain)
        if not isinstance(block, dict):
            raise _refused(param, "does not hold a reasoning block")
        return block


def _refused(param: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"{param}: {why}", param)


class ChainOpener:
    """Opens sealed reasoning for any model of a request's chain, and remembers which model
    the latest block was sealed for: the conversation's thinking is bound to that model, so
    the request goes there (gateway/chain.py never moves signed thinking to another model).

    With one model it is that model's `Sealer.open`, errors included."""

    __slots__ = ("_sealers", "opened_by")

    def __init__(self, org_id: int, model_ids: list[str]) -> None:
        self._sealers = [(model_id, Sealer(org_id, model_id)) for model_id in model_ids]
        self.opened_by: str | None = None

    def open(self, blob: str, param: str) -> dict[str, Any]:
        first: InvalidRequest | None = None
        for model_id, sealer in self._sealers:
            try:
                block = sealer.open(blob, param)
            except InvalidRequest as exc:
                first = first or exc
                continue
            self.opened_by = model_id
            return block
        assert first is not None, "a chain has at least one model"
        raise first
