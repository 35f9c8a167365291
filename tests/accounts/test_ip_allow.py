"""Issue 34: keys' IP allow-lists (accounts/ip_allow.py), table-driven."""

from __future__ import annotations

import pytest

from accounts import ip_allow

TRUSTED = ip_allow.networks(["10.0.0.0/8"])


@pytest.mark.parametrize(
    ("entries", "canonical"),
    [
        (["203.0.113.7"], ["203.0.113.7/32"]),
        (["10.1.2.3/8", "10.0.0.0/8"], ["10.0.0.0/8"]),  # host bits dropped, then deduplicated
        ([" 2001:db8::/32 "], ["2001:db8::/32"]),
    ],
)
def test_clean_networks(entries: list[str], canonical: list[str]) -> None:
    assert ip_allow.clean_networks(entries) == canonical


@pytest.mark.parametrize("bad", ["300.1.1.1", "10.0.0.0/33", "example.com", ""])
def test_bad_entries_are_named(bad: str) -> None:
    with pytest.raises(ip_allow.InvalidNetwork):
        ip_allow.clean_networks([bad])


def test_split_text_takes_commas_and_lines() -> None:
    assert ip_allow.split_text("1.2.3.4, 5.6.7.0/24\n::1") == ["1.2.3.4", "5.6.7.0/24", "::1"]


@pytest.mark.parametrize(
    ("peer", "xff", "caller"),
    [
        ("198.51.100.9", None, "198.51.100.9"),
        ("198.51.100.9", "1.2.3.4", "198.51.100.9"),  # untrusted peer: its header is ignored
        ("10.0.0.5", "203.0.113.9", "203.0.113.9"),  # through our proxy
        ("10.0.0.5", "6.6.6.6, 203.0.113.9, 10.0.0.4", "203.0.113.9"),  # spoofed left part
        ("10.0.0.5", "10.0.0.7", "10.0.0.7"),  # every hop trusted: the leftmost
        ("10.0.0.5", "junk", "10.0.0.5"),
        ("::ffff:198.51.100.9", None, "198.51.100.9"),  # IPv4 on a dual-stack socket
        (None, "1.2.3.4", None),
    ],
)
def test_client_address(peer: str | None, xff: str | None, caller: str | None) -> None:
    assert ip_allow.client_address(peer, xff, TRUSTED) == caller


def test_allows() -> None:
    nets = ip_allow.networks(["203.0.113.0/24", "2001:db8::/32"])
    assert ip_allow.allows("203.0.113.200", nets)
    assert ip_allow.allows("2001:db8::1", nets)
    assert not ip_allow.allows("198.51.100.1", nets)
    assert not ip_allow.allows(None, nets)
    assert ip_allow.allows("198.51.100.1", ())  # no list: anywhere
