from __future__ import annotations

# Pure tests of the SSRF address policy and of static URL checks — no network, no Django.
import ipaddress
import socket

import httpcore
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.images import is_public_address
from gateway.images.addresses import (
    ends_in_number,
    is_allowed_address,
    parse_ipv4_literal,
)
from gateway.images.errors import (
    MESSAGE_BAD_SCHEME,
    MESSAGE_DOWNGRADE,
    MESSAGE_INVALID_URL,
    MESSAGE_NOT_PUBLIC,
    MESSAGE_PORT,
    MESSAGE_USERINFO,
    AddressNotPublicError,
    DownloadRefused,
    HostResolutionError,
    PortNotAllowedError,
)
from gateway.images.network import GuardedNetworkBackend
from gateway.images.urls import ImageTarget, parse_image_url, resolve_redirect

REFUSED_ADDRESSES = [
    # "this network" / unspecified
    "0.0.0.0",
    "0.1.2.3",
    "::",
    # RFC 1918
    "10.0.0.1",
    "10.255.255.255",
    "172.16.0.1",
    "172.31.255.254",
    "192.168.0.1",
    "192.168.255.255",
    # loopback
    "127.0.0.1",
    "127.255.255.254",
    "::1",
    # link-local incl. cloud metadata
    "169.254.169.254",
    "169.254.0.1",
    "fe80::1",
    "fe80::1%1",
    "febf:ffff::1",
    # site-local (deprecated) and unique-local
    "fec0::1",
    "fc00::1",
    "fd12:3456:789a::1",
    # carrier-grade NAT
    "100.64.0.1",
    "100.127.255.254",
    # multicast
    "224.0.0.1",
    "239.255.255.250",
    "ff02::1",
    "ff0e::1",
    # reserved, broadcast
    "240.0.0.1",
    "255.255.255.255",
    # IETF protocol assignments, 6to4 relay anycast
    "192.0.0.1",
    "192.0.0.170",
    "192.88.99.1",
    # benchmarking
    "198.18.0.1",
    "198.19.255.255",
    "2001:2::1",
    # documentation
    "192.0.2.1",
    "198.51.100.7",
    "203.0.113.9",
    "2001:db8::1",
    "3fff::1",
    # IPv4-mapped IPv6 embedding non-public IPv4
    "::ffff:127.0.0.1",
    "::ffff:7f00:1",
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:0.0.0.0",
    # IPv4-compatible (deprecated), SIIT translated
    "::127.0.0.1",
    "::8.8.8.8",
    "::ffff:0:808:808",
    # NAT64 well-known prefix embedding non-public IPv4; local-use NAT64 always
    "64:ff9b::a00:1",
    "64:ff9b::7f00:1",
    "64:ff9b::a9fe:a9fe",
    "64:ff9b:1::808:808",
    "64:ff9b:1:abcd::1",
    # 6to4 embedding non-public IPv4
    "2002:7f00:1::1",
    "2002:a00:1::",
    "2002:c0a8:101::1",
    # Teredo (always), ORCHID
    "2001::1",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",
    "2001:10::1",
    "2001:20::1",
    # discard-only, SRv6 SIDs, unallocated space outside 2000::/3
    "100::1",
    "5f00::1",
    "4000::1",
]

PUBLIC_ADDRESSES = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.215.14",
    "100.63.255.255",  # just below CGNAT
    "100.128.0.1",  # just above CGNAT
    "172.15.255.255",
    "172.32.0.1",
    "2606:4700::1111",
    "2a00:1450:4001:82a::200e",
    "::ffff:8.8.8.8",  # mapped: judged by the embedded (public) address
    "64:ff9b::808:808",  # NAT64 of 8.8.8.8 (DNS64 deployments)
    "2002:808:808::1",  # 6to4 of 8.8.8.8
]


@pytest.mark.parametrize("text", REFUSED_ADDRESSES)
def test_refused_addresses(text: str) -> None:
    ip = ipaddress.ip_address(text)
    assert is_public_address(ip) is False
    # The loopback test switch opens nothing but 127/8 and ::1.
    expect_loopback = text in {"127.0.0.1", "127.255.255.254", "::1"}
    assert is_allowed_address(ip, allow_loopback=True) is expect_loopback


@pytest.mark.parametrize("text", PUBLIC_ADDRESSES)
def test_public_addresses(text: str) -> None:
    assert is_public_address(ipaddress.ip_address(text)) is True


def test_rejects_non_address_type() -> None:
    with pytest.raises(TypeError):
        is_public_address("8.8.8.8")  # type: ignore[arg-type]


_PRIVATE_V4_NETS = [
    ipaddress.IPv4Network(n)
    for n in ("10.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16")
]


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_embedded_forms_are_judged_like_their_ipv4(value: int) -> None:
    v4 = ipaddress.IPv4Address(value)
    expected = is_public_address(v4)
    mapped = ipaddress.IPv6Address((0xFFFF << 32) | value)
    nat64 = ipaddress.IPv6Address((0x0064FF9B << 96) | value)
    six_to_four = ipaddress.IPv6Address((0x2002 << 112) | (value << 80) | 1)
    assert is_public_address(mapped) is expected
    assert is_public_address(nat64) is expected
    assert is_public_address(six_to_four) is expected
    if any(v4 in net for net in _PRIVATE_V4_NETS):
        assert expected is False


@given(st.integers(min_value=0, max_value=2**128 - 1))
def test_ipv6_outside_global_unicast_is_refused(value: int) -> None:
    ip = ipaddress.IPv6Address(value)
    special = (
        ip.ipv4_mapped is not None
        or ip in ipaddress.IPv6Network("64:ff9b::/96")
        or ip in ipaddress.IPv6Network("2000::/3")
    )
    if not special:
        assert is_public_address(ip) is False


# --- numeric host spellings ---------------------------------------------------------------

NUMERIC_HOSTS = [
    ("2130706433", "127.0.0.1"),
    ("0x7f000001", "127.0.0.1"),
    ("017700000001", "127.0.0.1"),
    ("0177.0.0.1", "127.0.0.1"),
    ("0x7f.1", "127.0.0.1"),
    ("0x7F.0.0.0x1", "127.0.0.1"),
    ("127.1", "127.0.0.1"),
    ("127.0.1", "127.0.0.1"),
    ("127.0.0.1.", "127.0.0.1"),
    ("0", "0.0.0.0"),
    ("0x", "0.0.0.0"),
    ("10.1", "10.0.0.1"),
    ("169.254.43518", "169.254.169.254"),
    ("0xa9fea9fe", "169.254.169.254"),
    ("134744072", "8.8.8.8"),
]


@pytest.mark.parametrize(("host", "expected"), NUMERIC_HOSTS)
def test_numeric_host_forms_parse_like_inet_aton(host: str, expected: str) -> None:
    assert ends_in_number(host)
    assert parse_ipv4_literal(host) == ipaddress.IPv4Address(expected)


@pytest.mark.parametrize("host", ["1.2.3.4.5", "256.1.1.1", "1.2.3.256", "1.16777216", "08.1"])
def test_invalid_numeric_hosts(host: str) -> None:
    assert ends_in_number(host)
    assert parse_ipv4_literal(host) is None


@pytest.mark.parametrize("host", ["example.com", "1.example", "0xfoo.com", "images.cdn"])
def test_names_are_not_numeric(host: str) -> None:
    assert not ends_in_number(host)


_ipv4_parts = st.lists(st.integers(min_value=0, max_value=255), min_size=4, max_size=4)


@given(_ipv4_parts, st.sampled_from(["dec", "oct", "hex"]), st.integers(1, 4))
def test_parser_agrees_with_libc_inet_aton(parts: list[int], radix: str, count: int) -> None:
    # Collapse the trailing components into the last one, as "127.1" does.
    value = int.from_bytes(bytes(parts), "big")
    leading = parts[: count - 1]
    last = value & ((1 << (8 * (5 - count))) - 1)
    fmt = {"dec": "{}", "oct": "0{:o}", "hex": "0x{:x}"}[radix]
    host = ".".join(fmt.format(n) for n in [*leading, last])
    ours = parse_ipv4_literal(host)
    assert ours == ipaddress.IPv4Address(value)
    assert socket.inet_aton(host) == ours.packed


# --- URL hosts ----------------------------------------------------------------------------

REFUSED_URLS = [
    "http://2130706433/",
    "http://0177.0.0.1/",
    "http://0x7f.1/",
    "http://0x7f000001/",
    "http://127.1/",
    "http://127.0.0.1/",
    "http://127.0.0.1./",
    "http://0.0.0.0/",
    "http://0/",
    "http://[::]/",
    "http://[::1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::ffff:a9fe:a9fe]/",
    "http://[64:ff9b::a00:1]/",
    "http://[64:ff9b:1::808:808]/",
    "http://[2002:7f00:1::1]/",
    "http://[2001::1]/",
    "http://169.254.169.254/latest/meta-data/",
    "http://0xa9fea9fe/",
    "http://169.254.43518/",
    "http://[fe80::1]/",
    "http://[fe80::1%25eth0]/",
    "http://[fc00::1]/",
    "http://100.64.0.1/",
    "http://10.0.0.1/",
    "http://10.1/",
    "http://172.16.0.1/",
    "http://192.168.1.1/",
    "http://198.18.0.1/",
    "http://224.0.0.1/",
    "http://255.255.255.255/",
    "https://192.0.2.1/",
]


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_non_public_url_hosts_are_refused(url: str) -> None:
    with pytest.raises(DownloadRefused) as info:
        parse_image_url(url, allow_loopback=False)
    assert info.value.message == MESSAGE_NOT_PUBLIC


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8080/x", "http://[::1]:1234/x", "http://localhost:9/x"],
)
def test_loopback_switch_allows_loopback_on_any_port(url: str) -> None:
    target = parse_image_url(url, allow_loopback=True)
    assert target.port == httpx.URL(url).port


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/",
        "http://[::ffff:127.0.0.1]/",  # mapped loopback is not what the switch opens
        "http://169.254.169.254/",
        "http://127.1:8080/",  # still non-canonical
    ],
)
def test_loopback_switch_opens_nothing_else(url: str) -> None:
    with pytest.raises(DownloadRefused):
        parse_image_url(url, allow_loopback=True)


@pytest.mark.parametrize(
    "url",
    [
        "http://8.8.8.8/cat.png",
        "https://[2606:4700::1111]/cat.png",
        "https://images.example.com/a.png?x=1",
        "https://xn--mnchen-3ya.de/bild.jpg",
        "http://example.com:443/x",
        "https://example.com:80/x",
        "https://münchen.de/bild.jpg",
    ],
)
def test_acceptable_urls(url: str) -> None:
    target = parse_image_url(url, allow_loopback=False)
    assert target.port in (80, 443)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://example.com/a.png", MESSAGE_BAD_SCHEME),
        ("file:///etc/passwd", MESSAGE_BAD_SCHEME),
        ("gopher://example.com/", MESSAGE_BAD_SCHEME),
        ("data:image/png;base64,AAAA", MESSAGE_BAD_SCHEME),
        ("//example.com/a.png", MESSAGE_BAD_SCHEME),
        ("http://user:pw@example.com/a.png", MESSAGE_USERINFO),
        ("http://user@example.com/a.png", MESSAGE_USERINFO),
        ("http://@example.com/a.png", MESSAGE_USERINFO),
        ("http://example.com@10.0.0.1/", MESSAGE_USERINFO),
        ("http://example.com:8080/a.png", MESSAGE_PORT),
        ("http://example.com:22/", MESSAGE_PORT),
        ("http:///a.png", MESSAGE_INVALID_URL),
        ("http://1.2.3.4.5/", MESSAGE_INVALID_URL),
        ("http://%31%32%37.0.0.1/", MESSAGE_INVALID_URL),
        ("http://exa mple.com/", MESSAGE_INVALID_URL),
        ("http://example.com:99999/", MESSAGE_INVALID_URL),
    ],
)
def test_malformed_urls(url: str, message: str) -> None:
    with pytest.raises(DownloadRefused) as info:
        parse_image_url(url, allow_loopback=False)
    assert info.value.message == message


def test_public_numeric_forms_are_refused_as_non_canonical() -> None:
    for url in ("http://134744072/", "http://0x8.0x8.0x8.0x8/", "http://8.8.2056/"):
        with pytest.raises(DownloadRefused) as info:
            parse_image_url(url, allow_loopback=False)
        assert info.value.message.startswith(MESSAGE_INVALID_URL)


# --- redirects ----------------------------------------------------------------------------


def _target(url: str) -> ImageTarget:
    return parse_image_url(url, allow_loopback=False)


def test_relative_redirects_resolve_against_current_url() -> None:
    current = _target("https://cdn.example.com/a/b/c.png?x=1")
    assert str(resolve_redirect(current, "d.png", allow_loopback=False).url) == (
        "https://cdn.example.com/a/b/d.png"
    )
    assert str(resolve_redirect(current, "/e.png", allow_loopback=False).url) == (
        "https://cdn.example.com/e.png"
    )
    scheme_relative = resolve_redirect(current, "//other.example/f.png", allow_loopback=False)
    assert str(scheme_relative.url) == "https://other.example/f.png"


@pytest.mark.parametrize(
    ("location", "message"),
    [
        ("http://10.0.0.1/x", MESSAGE_NOT_PUBLIC),
        ("//169.254.169.254/latest", MESSAGE_NOT_PUBLIC),
        ("http://[::ffff:127.0.0.1]/", MESSAGE_NOT_PUBLIC),
        ("http://2130706433/", MESSAGE_NOT_PUBLIC),
        ("http://0177.0.0.1/", MESSAGE_NOT_PUBLIC),
        ("http://cdn.example.com/a.png", MESSAGE_DOWNGRADE),
        ("file:///etc/passwd", MESSAGE_BAD_SCHEME),
        ("http://u:p@cdn.example.com/", MESSAGE_USERINFO),
        ("https://cdn.example.com:8443/", MESSAGE_PORT),
    ],
)
def test_redirect_targets_are_checked_like_request_urls(location: str, message: str) -> None:
    current = _target("https://cdn.example.com/a.png")
    with pytest.raises(DownloadRefused) as info:
        resolve_redirect(current, location, allow_loopback=False)
    assert info.value.message == message


def test_upgrade_redirect_is_allowed() -> None:
    current = _target("http://cdn.example.com/a.png")
    assert resolve_redirect(current, "https://cdn.example.com/a.png", allow_loopback=False)


# --- connect-time vetting in the guarded backend, with a fake inner backend (no sockets) ----


class _FakeStream(httpcore.AsyncNetworkStream):
    def __init__(self, peer: tuple[str, int]) -> None:
        self.peer = peer
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True

    def get_extra_info(self, info: str) -> object:
        return self.peer if info == "server_addr" else None


class _FakeInner(httpcore.AsyncNetworkBackend):
    def __init__(self, peers: dict[str, tuple[str, int] | None]) -> None:
        self.peers = peers
        self.attempts: list[tuple[str, int]] = []
        self.streams: list[_FakeStream] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: object = None,
    ) -> httpcore.AsyncNetworkStream:
        self.attempts.append((host, port))
        peer = self.peers.get(host)
        if peer is None:
            raise httpcore.ConnectError("refused")
        stream = _FakeStream(peer)
        self.streams.append(stream)
        return stream


def _backend(
    answers: list[str], peers: dict[str, tuple[str, int] | None], *, allow_loopback: bool = False
) -> tuple[GuardedNetworkBackend, _FakeInner]:
    async def resolver(host: str, port: int) -> list[str]:
        return answers

    inner = _FakeInner(peers)
    backend = GuardedNetworkBackend(allow_loopback=allow_loopback, resolver=resolver, inner=inner)
    return backend, inner


async def test_backend_connects_by_vetted_ip() -> None:
    backend, inner = _backend(["2606:4700::1111", "8.8.8.8"], {"8.8.8.8": ("8.8.8.8", 443)})
    stream = await backend.connect_tcp("images.example", 443)
    assert isinstance(stream, _FakeStream)
    assert inner.attempts == [("2606:4700::1111", 443), ("8.8.8.8", 443)]


@pytest.mark.parametrize(
    "answers",
    [["10.0.0.1"], ["8.8.8.8", "192.168.1.1"], ["::ffff:127.0.0.1"], ["not-an-ip"]],
)
async def test_backend_refuses_before_connecting(answers: list[str]) -> None:
    backend, inner = _backend(answers, {})
    with pytest.raises(AddressNotPublicError):
        await backend.connect_tcp("images.example", 443)
    assert inner.attempts == []


async def test_backend_refuses_empty_answer() -> None:
    backend, _inner = _backend([], {})
    with pytest.raises(HostResolutionError):
        await backend.connect_tcp("images.example", 443)


async def test_backend_port_rule_applies_to_public_peers_even_in_loopback_mode() -> None:
    backend, inner = _backend(["8.8.8.8"], {"8.8.8.8": ("8.8.8.8", 8080)}, allow_loopback=True)
    with pytest.raises(PortNotAllowedError):
        await backend.connect_tcp("images.example", 8080)
    assert inner.attempts == []


@pytest.mark.parametrize("peer", [("10.0.0.1", 443), ("1.1.1.1", 443), ("::ffff:10.0.0.1", 443)])
async def test_backend_checks_the_connected_peer(peer: tuple[str, int]) -> None:
    backend, inner = _backend(["8.8.8.8"], {"8.8.8.8": peer})
    with pytest.raises(AddressNotPublicError):
        await backend.connect_tcp("images.example", 443)
    assert inner.streams[0].closed


async def test_backend_accepts_mapped_peer_of_the_same_address() -> None:
    backend, _inner = _backend(["8.8.8.8"], {"8.8.8.8": ("::ffff:8.8.8.8", 443)})
    assert await backend.connect_tcp("images.example", 443)


async def test_backend_never_opens_unix_sockets() -> None:
    backend, _inner = _backend([], {})
    with pytest.raises(AddressNotPublicError):
        await backend.connect_unix_socket("/var/run/docker.sock")
