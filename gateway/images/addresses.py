from __future__ import annotations

# Which IP addresses the image downloader may connect to, and how numeric URL hosts parse.
#
# Everything here is a pure function so the SSRF policy can be tested exhaustively without
# a network. The policy is an allowlist-with-exceptions rather than "refuse a few private
# ranges": for IPv6 only global unicast (2000::/3) is acceptable at all, and the few
# transition forms that embed an IPv4 address are judged by that embedded address.
import ipaddress
from typing import Final

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# IPv4 ranges that are never a public web server (IANA special-purpose registry, RFC 6890
# and successors). We keep our own table instead of trusting only `ipaddress.is_global`
# because its answer changed between CPython patch releases (CVE-2024-4032) and it calls
# multicast "global"; the stdlib flags are still consulted as a second opinion below.
_BLOCKED_V4: Final[tuple[ipaddress.IPv4Network, ...]] = tuple(
    ipaddress.IPv4Network(net)
    for net in (
        "0.0.0.0/8",  # "this network"; 0.0.0.0 reaches the local host on Linux
        "10.0.0.0/8",  # private (RFC 1918)
        "100.64.0.0/10",  # carrier-grade NAT shared space (RFC 6598)
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local, includes cloud metadata 169.254.169.254
        "172.16.0.0/12",  # private (RFC 1918)
        "192.0.0.0/24",  # IETF protocol assignments (DS-Lite, NAT64 discovery, ...)
        "192.0.2.0/24",  # documentation TEST-NET-1
        "192.88.99.0/24",  # deprecated 6to4 relay anycast (RFC 7526)
        "192.168.0.0/16",  # private (RFC 1918)
        "198.18.0.0/15",  # benchmarking (RFC 2544)
        "198.51.100.0/24",  # documentation TEST-NET-2
        "203.0.113.0/24",  # documentation TEST-NET-3
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, includes broadcast 255.255.255.255
    )
)

_GLOBAL_UNICAST_V6: Final = ipaddress.IPv6Network("2000::/3")
# Inside 2000::/3 but still not somewhere an image may come from.
_BLOCKED_V6: Final[tuple[ipaddress.IPv6Network, ...]] = tuple(
    ipaddress.IPv6Network(net)
    for net in (
        # IETF protocol assignments: Teredo 2001::/32 (the server/client IPv4 addresses it
        # embeds are obfuscated and relay-dependent, so we refuse rather than judge them),
        # benchmarking 2001:2::/48, ORCHID 2001:10::/28 and ORCHIDv2 2001:20::/28.
        "2001::/23",
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation (RFC 9637)
    )
)
# Outside 2000::/3 and therefore refused by default, but judged by the embedded IPv4
# address: a DNS64 resolver on an IPv6-only host synthesises these for ordinary public
# IPv4 sites, so refusing them outright would break such deployments.
_NAT64_WELL_KNOWN: Final = ipaddress.IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR: Final = ipaddress.IPv6Network("2002::/16")
# Deliberately NOT listed: 64:ff9b:1::/48 (RFC 8215 local-use NAT64). The operator picks
# the prefix length there, so the embedded IPv4 address cannot be located reliably; it is
# outside 2000::/3 and therefore refused.

_LOOPBACK_V4: Final = ipaddress.IPv4Network("127.0.0.0/8")
_LOOPBACK_V6: Final = ipaddress.IPv6Address("::1")


def _is_public_v4(ip: ipaddress.IPv4Address) -> bool:
    if any(ip in net for net in _BLOCKED_V4):
        return False
    # Second opinion from the stdlib; it can only make us stricter.
    return ip.is_global and not (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
    )


def _is_public_v6(ip: ipaddress.IPv6Address) -> bool:
    if ip.scope_id:
        # A zone index only makes sense for link-scoped addresses.
        return False
    mapped = ip.ipv4_mapped  # ::ffff:a.b.c.d — the socket really talks IPv4 to a.b.c.d
    if mapped is not None:
        return _is_public_v4(mapped)
    if ip in _NAT64_WELL_KNOWN:
        # RFC 6052: the IPv4 address is the last 32 bits for the /96 well-known prefix.
        return _is_public_v4(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    six_to_four = ip.sixtofour  # 2002:AABB:CCDD::/48 tunnels to AA.BB.CC.DD
    if six_to_four is not None:
        return _is_public_v4(six_to_four)
    # Everything below 2000::/3 is refused here: ::, ::1, IPv4-compatible ::/96, SIIT
    # ::ffff:0:0:0/96, discard 100::/64, local-use NAT64, ULA fc00::/7, link-local
    # fe80::/10, site-local fec0::/10, multicast ff00::/8, SRv6 5f00::/16, ...
    if ip not in _GLOBAL_UNICAST_V6:
        return False
    if any(ip in net for net in _BLOCKED_V6):
        return False
    return not (ip.is_private or ip.is_multicast or ip.is_reserved or ip.is_link_local)


def is_public_address(ip: IPAddress) -> bool:
    """True when `ip` is a globally routable unicast address an image may be fetched from.

    IPv4-mapped, NAT64 (64:ff9b::/96) and 6to4 addresses are judged by the IPv4 address
    they embed, because that is where the packets end up.
    """
    if isinstance(ip, ipaddress.IPv4Address):
        return _is_public_v4(ip)
    if isinstance(ip, ipaddress.IPv6Address):
        return _is_public_v6(ip)
    raise TypeError(f"expected an IPv4Address or IPv6Address, got {type(ip).__name__}")


def is_loopback_address(ip: IPAddress) -> bool:
    """127.0.0.0/8 or ::1 exactly — the only ranges the test-only loopback switch opens.

    Mapped (::ffff:127.0.0.1) and scoped forms are intentionally not loopback here: the
    switch exists for a local test server, which never needs them.
    """
    if isinstance(ip, ipaddress.IPv4Address):
        return ip in _LOOPBACK_V4
    return not ip.scope_id and ip == _LOOPBACK_V6


def is_allowed_address(ip: IPAddress, *, allow_loopback: bool) -> bool:
    """The connect-time rule: public, or loopback when the test setting is on."""
    return is_public_address(ip) or (allow_loopback and is_loopback_address(ip))


def parse_ip(text: str) -> IPAddress | None:
    """Strict canonical IP literal ("127.0.0.1", "::1", "fe80::1%eth0"), else None."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


# --- numeric host forms -------------------------------------------------------------------
#
# libc's inet_aton() — and therefore getaddrinfo() and every browser (the WHATWG URL
# standard copied it) — accepts "2130706433", "0x7f.1", "0177.0.0.1" and "127.1" as
# 127.0.0.1. We parse exactly those forms ourselves so a URL host is judged by the address
# a resolver would produce, independent of the platform's libc quirks (glibc also ignores
# anything after whitespace, for instance).

_DIGITS: Final = frozenset("0123456789")
_OCTAL_DIGITS: Final = frozenset("01234567")
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")


def _parse_ipv4_number(part: str) -> int | None:
    """One dotted component: decimal, 0-prefixed octal or 0x-prefixed hex (WHATWG rules)."""
    if not part:
        return None
    digits, radix, allowed = part, 10, _DIGITS
    if len(part) >= 2 and part[:2] in ("0x", "0X"):
        digits, radix, allowed = part[2:], 16, _HEX_DIGITS
    elif len(part) >= 2 and part[0] == "0":
        digits, radix, allowed = part[1:], 8, _OCTAL_DIGITS
    if not digits:
        return 0  # "0x" alone is zero in the WHATWG parser
    if not set(digits) <= allowed:
        return None
    try:
        return int(digits, radix)
    except ValueError:  # beyond the int/str digit limit: far too large anyway
        return None


def _labels(host: str) -> list[str]:
    labels = host.split(".")
    if len(labels) > 1 and labels[-1] == "":
        labels.pop()  # one trailing dot ("127.0.0.1.") is the fully qualified spelling
    return labels


def ends_in_number(host: str) -> bool:
    """WHATWG "ends in a number": a host whose last label is numeric is an IPv4 literal.

    Such a host must parse as IPv4 or be rejected; it is never handed to DNS, which would
    apply its own (libc) interpretation.
    """
    last = _labels(host)[-1]
    if last and set(last) <= _DIGITS:
        return True
    return _parse_ipv4_number(last) is not None


def parse_ipv4_literal(host: str) -> ipaddress.IPv4Address | None:
    """Parse any inet_aton/WHATWG spelling of an IPv4 address; None if it is not one."""
    labels = _labels(host)
    if len(labels) > 4:
        return None
    numbers: list[int] = []
    for label in labels:
        number = _parse_ipv4_number(label)
        if number is None:
            return None
        numbers.append(number)
    *leading, last = numbers
    if any(n > 255 for n in leading):
        return None
    # The last component fills all remaining bytes: "127.1" → 127.0.0.1, "2130706433" → /32.
    if last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for index, number in enumerate(leading):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)
