"""API key format, checksum and hashing."""

from __future__ import annotations

import hashlib
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accounts import keys


def test_format_prefix_length_and_entropy() -> None:
    key = keys.generate()
    assert key.startswith("ezat_sk_")
    assert len(key) == len("ezat_sk_") + keys.BODY_LENGTH + keys.CHECKSUM_LENGTH
    assert keys.BODY_LENGTH * math.log2(62) >= 160
    assert keys.is_well_formed(key)


def test_keys_are_unique() -> None:
    assert len({keys.generate() for _ in range(500)}) == 500


def test_hash_is_sha256_hex() -> None:
    key = keys.generate()
    assert keys.hash_key(key) == hashlib.sha256(key.encode()).hexdigest()


def test_display_prefix_does_not_reveal_the_secret() -> None:
    key = keys.generate()
    prefix = keys.display_prefix(key)
    assert key.startswith(prefix) and len(prefix) <= len("ezat_sk_") + 6


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "ezat_sk_",
        "sk-ant-123",
        "ezat_mk_" + "a" * 38,
        "ezat_sk_" + "a" * 37,
        "ezat_sk_" + "a" * 39,
    ],
)
def test_malformed_keys_rejected(bad: str) -> None:
    assert not keys.is_well_formed(bad)


def test_management_prefix_is_a_different_namespace() -> None:
    management = keys.generate(keys.MANAGEMENT_PREFIX)
    assert keys.is_well_formed(management, keys.MANAGEMENT_PREFIX)
    assert not keys.is_well_formed(management)


@given(
    st.integers(min_value=0, max_value=keys.BODY_LENGTH + keys.CHECKSUM_LENGTH - 1),
    st.sampled_from(keys.ALPHABET),
)
def test_any_single_character_typo_breaks_the_checksum(position: int, replacement: str) -> None:
    key = keys.generate()
    index = len(keys.PREFIX) + position
    if key[index] == replacement:
        return
    typo = key[:index] + replacement + key[index + 1 :]
    # The checksum covers the body; a changed checksum character no longer matches either.
    assert not keys.is_well_formed(typo)
