from __future__ import annotations

# The SSRF boundary: an httpcore network backend that only ever opens sockets to vetted
# addresses.
#
# httpcore hands `connect_tcp` the URL's host name. We resolve it ONCE, refuse the whole
# host if ANY answer is not allowed (a name that also points inside our network is hostile
# or misconfigured; filtering would make the outcome depend on answer order), connect to
# the vetted IP itself — never to the name, so a second DNS lookup cannot rebind it — and
# finally re-check the socket's peer address. httpcore keeps using the name for the Host
# header and for TLS (SNI and certificate verification), so HTTPS still authenticates the
# name. Every redirect hop opens its connection through here; pooled keep-alive
# connections were vetted when they were opened.
#
# Trade-off: we go through httpcore directly instead of httpx.AsyncClient. httpx's client
# honours HTTP(S)_PROXY from the environment, and a proxy would make the peer check
# meaningless (we would vet the proxy, not the target); httpcore has no such implicit
# behaviour.
import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable

import httpcore

from gateway.images.addresses import (
    IPAddress,
    is_allowed_address,
    is_loopback_address,
    parse_ip,
)
from gateway.images.errors import (
    AddressNotPublicError,
    HostResolutionError,
    PortNotAllowedError,
)
from gateway.images.urls import ALLOWED_PORTS

# (host, port) -> textual addresses. Injectable so tests can map names without touching DNS.
Resolver = Callable[[str, int], Awaitable[list[str]]]
# Mirrors httpcore's SOCKET_OPTION alias, which is not public API.
SocketOption = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)


async def system_resolver(host: str, port: int) -> list[str]:
    """getaddrinfo() in the default executor, TCP answers only, duplicates dropped."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )
    except (socket.gaierror, UnicodeError) as exc:
        raise HostResolutionError() from exc
    addresses: list[str] = []
    for family, _type, _proto, _canonname, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            text = str(sockaddr[0])
            if text not in addresses:
                addresses.append(text)
    return addresses


class GuardedNetworkBackend(httpcore.AsyncNetworkBackend):
    """Connects only to addresses that pass `is_allowed_address`, on allowed ports."""

    def __init__(
        self,
        *,
        allow_loopback: bool,
        resolver: Resolver = system_resolver,
        inner: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self._allow_loopback = allow_loopback
        self._resolver = resolver
        self._inner = inner if inner is not None else httpcore.AnyIOBackend()

    async def vetted_addresses(self, host: str, port: int) -> list[IPAddress]:
        """Resolve `host` once and return its addresses, refusing if any is not allowed."""
        literal = parse_ip(host)
        if literal is not None:
            addresses: list[IPAddress] = [literal]
        else:
            answers = await self._resolver(host, port)
            addresses = []
            for answer in answers:
                parsed = parse_ip(answer)
                if parsed is None:  # a resolver that returns garbage is not trusted
                    raise AddressNotPublicError()
                addresses.append(parsed)
            if not addresses:
                raise HostResolutionError()
        for address in addresses:
            self._check(address, port)
        return addresses

    def _check(self, address: IPAddress, port: int) -> None:
        if not is_allowed_address(address, allow_loopback=self._allow_loopback):
            raise AddressNotPublicError()
        # The loopback test switch opens any port, but only towards loopback itself.
        if port not in ALLOWED_PORTS and not (
            self._allow_loopback and is_loopback_address(address)
        ):
            raise PortNotAllowedError()

    def _check_peer(self, stream: httpcore.AsyncNetworkStream, expected: IPAddress) -> None:
        """Belt and braces: judge the address the kernel says we are connected to."""
        peer = stream.get_extra_info("server_addr")
        peer_ip = parse_ip(str(peer[0])) if isinstance(peer, tuple) and peer else None
        if peer_ip is None:
            raise AddressNotPublicError()  # fail closed if the peer cannot be determined
        if isinstance(peer_ip, ipaddress.IPv6Address) and peer_ip.ipv4_mapped is not None:
            # Dual-stack sockets may report an IPv4 peer in mapped form.
            peer_ip = peer_ip.ipv4_mapped
        if peer_ip != expected and not (
            isinstance(expected, ipaddress.IPv6Address) and expected.ipv4_mapped == peer_ip
        ):
            raise AddressNotPublicError()
        self._check(peer_ip, peer[1] if len(peer) > 1 else 0)

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self.vetted_addresses(host, port)
        last_error: Exception | None = None
        # Sequential fallback over the (all vetted) answers, e.g. ::1 refusing while
        # 127.0.0.1 listens. The caller's overall deadline bounds the total time.
        for address in addresses:
            try:
                stream = await self._inner.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:
                last_error = exc
                continue
            try:
                self._check_peer(stream, address)
            except BaseException:
                await stream.aclose()
                raise
            return stream
        raise last_error if last_error is not None else httpcore.ConnectError("no address")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise AddressNotPublicError()  # never used; refuse rather than delegate

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)
