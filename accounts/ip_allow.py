"""IP allow-lists of API keys (issue 34): CIDRs in, yes/no out. Pure: no Django, no I/O.

A key with an allow-list answers only callers whose address is inside one of its networks. The
caller's address is the TCP peer, unless that peer is a trusted proxy (EZAT_TRUSTED_PROXIES,
none by default): then X-Forwarded-For is read from the right, skipping trusted hops, and the
first address not trusted is the caller. Reading it from the left would let any client claim any
address by sending its own X-Forwarded-For, which the proxy only appends to.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_NETWORKS = 100


class InvalidNetwork(ValueError):
    """An allow-list entry that is not an IP address or a CIDR; the message names it."""


def parse_network(text: str) -> Network:
    """ "203.0.113.0/24", "2001:db8::/32" or one address ("198.51.100.7" = a /32). Host bits
    are allowed and dropped ("10.1.2.3/8" is 10.0.0.0/8): people paste their own address."""
    value = text.strip()
    try:
        return ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise InvalidNetwork(f"{value[:64]!r} is not an IP address or CIDR") from None


def clean_networks(entries: Iterable[str]) -> list[str]:
    """An allow-list in canonical form ("10.0.0.0/8"), in the order given, each once."""
    out: list[str] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, str) or not entry.strip():
            raise InvalidNetwork(f"entry {i + 1} is empty; give an IP address or a CIDR")
        canonical = str(parse_network(entry))
        if canonical not in out:
            out.append(canonical)
    if len(out) > MAX_NETWORKS:
        raise InvalidNetwork(f"at most {MAX_NETWORKS} networks per key")
    return out


def split_text(text: str) -> list[str]:
    """A form's textarea: networks separated by commas, spaces or new lines."""
    return [part for part in text.replace(",", " ").split() if part]


def networks(entries: Sequence[str]) -> tuple[Network, ...]:
    return tuple(parse_network(e) for e in entries)


def _address(text: str) -> Address | None:
    value = text.strip()
    if value.startswith("[") and "]" in value:  # "[2001:db8::1]:443" from some proxies
        value = value[1 : value.index("]")]
    elif value.count(":") == 1:  # "203.0.113.9:51234"
        value = value.partition(":")[0]
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    # An IPv4 client of a dual-stack socket arrives as ::ffff:a.b.c.d; lists name it as IPv4.
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _inside(address: Address, nets: Iterable[Network]) -> bool:
    return any(address.version == net.version and address in net for net in nets)


def client_address(
    peer: str | None, forwarded_for: str | None, trusted: Sequence[Network]
) -> str | None:
    """The caller's address as text, or None when the peer is unknown (a unix socket)."""
    hop = _address(peer) if peer else None
    if hop is None:
        return None
    if not forwarded_for or not _inside(hop, trusted):
        return str(hop)
    for part in reversed(forwarded_for.split(",")):
        claimed = _address(part)
        if claimed is None:
            break  # garbage from beyond our proxies: the last hop we trust is the caller
        hop = claimed
        if not _inside(hop, trusted):
            break
    return str(hop)


def allows(address: str | None, nets: Sequence[Network]) -> bool:
    """Whether `address` may use a key with these networks (an empty list allows everyone)."""
    if not nets:
        return True
    parsed = _address(address) if address else None
    return parsed is not None and _inside(parsed, nets)
