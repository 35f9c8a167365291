from __future__ import annotations

# Test doubles for the image downloader tests: a loopback HTTP app, a tripwire connector and
# a throwaway TLS certificate. Imported by test_images.py; not a test module itself.
import asyncio
import datetime
import ipaddress
import pathlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpcore
import pytest
from aiohttp import web

IMAGES = {
    "png": (b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "image/png"),
    "jpeg": (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 64, "image/jpeg"),
    "gif": (b"GIF89a" + b"\x00" * 64, "image/gif"),
    "gif87": (b"GIF87a" + b"\x00" * 64, "image/gif"),
    "webp": (b"RIFF\x24\x00\x00\x00WEBPVP8 " + b"\x00" * 64, "image/webp"),
}
PNG = IMAGES["png"][0]
KIB = 1024


class LoopbackOnlyConnector(httpcore.AsyncNetworkBackend):
    """Opens real sockets, but only to loopback; records every attempt.

    A tripwire under the guarded backend: if a regression let a non-loopback address
    through, the test fails here instead of sending a packet anywhere.
    """

    def __init__(self) -> None:
        self._real = httpcore.AnyIOBackend()
        self.attempts: list[tuple[str, int]] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: object = None,
    ) -> httpcore.AsyncNetworkStream:
        self.attempts.append((host, port))
        if not ipaddress.ip_address(host).is_loopback:
            raise AssertionError(f"tried to connect to {host}:{port}")
        return await self._real.connect_tcp(host, port, timeout=timeout)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@dataclass
class Server:
    base: str
    port: int
    hits: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    streamed: list[int] = field(default_factory=list)
    # Requests of /slow/* being answered now, and the most there ever were at once.
    in_flight: int = 0
    most_in_flight: int = 0
    # /stall: answers being sent now, and those whose client hung up before the end.
    stalling: int = 0
    hung_up: int = 0

    def url(self, path: str) -> str:
        return f"{self.base}{path}"


def png_of(size: int) -> bytes:
    return PNG + b"\x00" * (size - len(PNG))


def build_app(state: Server) -> web.Application:
    routes = web.RouteTableDef()

    @routes.get("/img/{kind}")
    async def image(request: web.Request) -> web.Response:
        body, _media = IMAGES[request.match_info["kind"]]
        return web.Response(body=body, content_type="text/plain")  # Content-Type lies

    @routes.get("/text")
    async def text(request: web.Request) -> web.Response:
        return web.Response(body=b"<html>definitely not an image</html>", content_type="image/png")

    @routes.get("/tiny")
    async def tiny(request: web.Request) -> web.Response:
        return web.Response(body=b"GIF", content_type="image/gif")

    @routes.get("/status/{code}")
    async def status(request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["code"]), body=PNG)

    @routes.get("/sized/{size}")
    async def sized(request: web.Request) -> web.Response:
        return web.Response(body=png_of(int(request.match_info["size"])))

    @routes.get("/endless")
    async def endless(request: web.Request) -> web.StreamResponse:
        # No Content-Length: the client must stop on its own byte count.
        response = web.StreamResponse()
        await response.prepare(request)
        chunk = b"\x00" * (64 * KIB)
        await response.write(PNG)
        sent = len(PNG)
        try:
            for _ in range(2000):  # 125 MiB; the client must hang up long before
                await response.write(chunk)
                sent += len(chunk)
        finally:
            state.streamed.append(sent)
        return response

    @routes.get("/declared-huge")
    async def declared_huge(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.content_length = 50 * 1024 * KIB
        await response.prepare(request)
        await response.write(PNG)
        await asyncio.sleep(30)  # only a client that trusts the header returns fast
        return response

    @routes.get("/slow/{delay}")
    async def slow(request: web.Request) -> web.Response:
        state.in_flight += 1
        state.most_in_flight = max(state.most_in_flight, state.in_flight)
        try:
            await asyncio.sleep(float(request.match_info["delay"]))
        finally:
            state.in_flight -= 1
        return web.Response(body=PNG)

    @routes.get("/drip")
    async def drip(request: web.Request) -> web.StreamResponse:
        # Every single read is quick; only a whole-download deadline stops this.
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(PNG)
        for _ in range(600):  # 30 s in all
            await asyncio.sleep(0.05)
            await response.write(b"\x00")
        return response

    @routes.get("/stall")
    async def stall(request: web.Request) -> web.StreamResponse:
        # An image that trickles for a minute: a client that gives up is seen hanging up (the
        # next write fails), one that does not keeps it here.
        response = web.StreamResponse()
        await response.prepare(request)
        state.stalling += 1
        try:
            await response.write(PNG)
            for _ in range(1200):
                await asyncio.sleep(0.05)
                await response.write(b"\x00")
        except (ConnectionError, asyncio.CancelledError):
            state.hung_up += 1
            raise
        finally:
            state.stalling -= 1
        return response

    @routes.get("/redirect/{n}")
    async def redirect(request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        if n == 0:
            return web.Response(body=PNG)
        # Alternate relative and absolute Locations.
        location = f"{n - 1}" if n % 2 else state.url(f"/redirect/{n - 1}")
        raise web.HTTPFound(location)

    @routes.get("/to")
    async def to(request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["u"])

    @routes.get("/no-location")
    async def no_location(request: web.Request) -> web.Response:
        return web.Response(status=302)

    @routes.get("/host")
    async def host(request: web.Request) -> web.Response:
        state.hosts.append(request.headers["Host"])
        return web.Response(body=PNG)

    @web.middleware
    async def record(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        state.hits.append(request.path)
        return await handler(request)

    app = web.Application(middlewares=[record])
    app.add_routes(routes)
    return app


def self_signed_cert(
    directory: pathlib.Path, *, host: str = "images.test"
) -> tuple[pathlib.Path, pathlib.Path]:
    """A self-signed certificate for `host` (a DNS name, or an IP address as its SAN)."""
    pytest.importorskip("cryptography")
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    try:
        alt_name: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        alt_name = x509.DNSName(host)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([alt_name]), False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path
