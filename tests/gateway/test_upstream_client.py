"""The provider HTTP client (gateway/upstream.py) against a scripted loopback HTTP server."""

from __future__ import annotations

import asyncio
import pathlib
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from catalog.snapshot import DeploymentInfo
from gateway import upstream
from gateway.upstream import UpstreamClient, UpstreamDisconnected
from tests.gateway.images.image_server import self_signed_cert

Reply = Callable[[asyncio.StreamWriter, bytes], object]


@dataclass
class Server:
    """Answers each request with `reply(writer, raw_request)`; records requests and connections."""

    reply: Reply
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                raw = head + await reader.readexactly(length)
                self.requests.append(raw)
                result = self.reply(writer, raw)
                if asyncio.iscoroutine(result):
                    await result
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def json_reply(body: bytes = b'{"ok":true}') -> Reply:
    def reply(writer: asyncio.StreamWriter, raw: bytes) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (len(body), body)
        )

    return reply


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Reply], asyncio.Future[Server]]]:
    servers: list[asyncio.Server] = []

    async def start(reply: Reply) -> Server:
        state = Server(reply)
        server = await asyncio.start_server(state.handle, "127.0.0.1", 0)
        state.port = server.sockets[0].getsockname()[1]
        servers.append(server)
        return state

    yield start  # type: ignore[misc]
    for server in servers:
        server.close()


def deployment(port: int, prefix: str = "") -> DeploymentInfo:
    return DeploymentInfo(
        id=1,
        name="d",
        kind="anthropic",
        base_url=f"http://127.0.0.1:{port}{prefix}",
        api_key="sk-up",
        weight=1,
        max_concurrency=10,
    )


async def test_request_line_headers_and_body(serve) -> None:
    server = await serve(json_reply())
    client = UpstreamClient()
    response = await client.post(
        deployment(server.port, "/proxy/"), "/v1/messages", b'{"a":1}', "b1"
    )
    assert response.status == 200
    assert response.headers["content-type"] == "application/json"
    assert await response.read() == b'{"ok":true}'
    raw = server.requests[0]
    assert raw.startswith(b"POST /proxy/v1/messages HTTP/1.1\r\n")
    for header in (
        b"host: 127.0.0.1:%d" % server.port,
        b"x-api-key: sk-up",
        b"anthropic-version: 2023-06-01",
        b"anthropic-beta: b1",
        b"accept-encoding: identity",
        b"content-length: 7",
    ):
        assert header + b"\r\n" in raw
    assert raw.endswith(b'\r\n\r\n{"a":1}')
    await client.close()


async def test_a_read_response_returns_its_connection_for_reuse(serve) -> None:
    server = await serve(json_reply())
    client = UpstreamClient()
    for _ in range(3):
        response = await client.post(deployment(server.port), "/v1/messages", b"{}")
        assert await response.read() == b'{"ok":true}'
    assert server.connections == 1
    assert len(server.requests) == 3
    await client.close()


async def test_a_half_read_response_is_never_reused(serve) -> None:
    async def slow_body(writer: asyncio.StreamWriter, raw: bytes) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await writer.drain()

    server = await serve(slow_body)
    client = UpstreamClient()
    response = await client.post(deployment(server.port), "/v1/messages", b"{}")
    assert await response.readany() == b"hello"
    response.close()
    assert await response.readany() == b""  # closed: never another request's bytes
    second = await client.post(deployment(server.port), "/v1/messages", b"{}")
    second.close()
    assert server.connections == 2
    await client.close()


async def test_chunks_arrive_as_they_are_sent_then_eof(serve) -> None:
    release = asyncio.Event()

    async def sse(writer: asyncio.StreamWriter, raw: bytes) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\nevent1\r\n")
        await writer.drain()
        await release.wait()
        writer.write(b"6\r\nevent2\r\n0\r\n\r\n")

    server = await serve(sse)
    client = UpstreamClient()
    response = await client.post(deployment(server.port), "/v1/messages", b"{}")
    assert await response.readany() == b"event1"
    pending = asyncio.ensure_future(response.readany())
    await asyncio.sleep(0.05)
    assert not pending.done()  # nothing more yet: the reader waits
    release.set()
    assert await pending == b"event2"
    assert await response.readany() == b""
    response.close()
    await client.close()


async def test_a_connection_dropped_mid_body_raises(serve) -> None:
    def drop(writer: asyncio.StreamWriter, raw: bytes) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        writer.close()

    server = await serve(drop)
    client = UpstreamClient()
    response = await client.post(deployment(server.port), "/v1/messages", b"{}")
    assert await response.readany() == b"partial"
    with pytest.raises(UpstreamDisconnected):
        await response.readany()
    assert isinstance(UpstreamDisconnected(), OSError)  # so CONNECT_ERRORS catches it
    await client.close()


async def test_garbage_instead_of_http_raises(serve) -> None:
    def garbage(writer: asyncio.StreamWriter, raw: bytes) -> None:
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")

    server = await serve(garbage)
    client = UpstreamClient()
    with pytest.raises(UpstreamDisconnected):
        await client.post(deployment(server.port), "/v1/messages", b"{}")
    await client.close()


async def test_cancelled_while_waiting_the_connection_is_dropped(serve) -> None:
    async def never(writer: asyncio.StreamWriter, raw: bytes) -> None:
        await asyncio.sleep(10)

    server = await serve(never)
    client = UpstreamClient()
    post = asyncio.ensure_future(client.post(deployment(server.port), "/v1/messages", b"{}"))
    await asyncio.sleep(0.05)
    post.cancel()
    with pytest.raises(asyncio.CancelledError):
        await post
    assert not client._idle.get(("http", "127.0.0.1", server.port))
    await client.close()


async def test_large_bodies_are_read_whole_with_backpressure(serve, monkeypatch) -> None:
    monkeypatch.setattr(upstream, "HIGH_WATER", 64 * 1024)
    body = bytes(range(256)) * 12_000  # ~3 MB
    server = await serve(json_reply(body))
    client = UpstreamClient()
    response = await client.post(deployment(server.port), "/v1/messages", b"x" * 500_000)
    assert await response.read() == body
    assert server.requests[0].endswith(b"x" * 500_000)
    await client.close()


async def test_stale_idle_connections_are_not_reused(serve, monkeypatch) -> None:
    server = await serve(json_reply())
    client = UpstreamClient()
    await (await client.post(deployment(server.port), "/v1/messages", b"{}")).read()
    monkeypatch.setattr(upstream, "KEEPALIVE_SECONDS", 0.0)
    await (await client.post(deployment(server.port), "/v1/messages", b"{}")).read()
    assert server.connections == 2
    await client.close()


async def test_refused_connection_is_an_os_error() -> None:
    client = UpstreamClient()
    with pytest.raises(OSError):
        await client.post(deployment(1), "/v1/messages", b"{}")


def test_only_http_and_https_urls() -> None:
    client = UpstreamClient()
    bad = DeploymentInfo(
        id=1, name="d", kind="k", base_url="ftp://x", api_key="k", weight=1, max_concurrency=1
    )
    with pytest.raises(ValueError, match="scheme"):
        asyncio.run(client.post(bad, "/v1/messages", b"{}"))


async def test_a_connection_close_answer_is_not_reused(serve) -> None:
    def close_after(writer: asyncio.StreamWriter, raw: bytes) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok")

    server = await serve(close_after)
    client = UpstreamClient()
    for _ in range(2):
        assert await (await client.post(deployment(server.port), "/v1/messages", b"{}")).read()
    assert server.connections == 2
    await client.close()


async def test_silence_wakes_the_reader_once_per_interval(serve) -> None:
    more = asyncio.Event()

    async def pause(writer: asyncio.StreamWriter, raw: bytes) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\na\r\n")
        await writer.drain()
        await more.wait()
        writer.write(b"1\r\nb\r\n0\r\n\r\n")

    server = await serve(pause)
    client = UpstreamClient()
    response = await client.post(deployment(server.port), "/v1/messages", b"{}")
    response.watch_idle(0.1)
    assert await response.readany() == b"a"
    loop = asyncio.get_running_loop()
    started = loop.time()
    for _ in range(2):  # one TimeoutError per silent interval, and reading goes on
        with pytest.raises(TimeoutError):
            await response.readany()
    assert 0.15 <= loop.time() - started < 1.0
    more.set()
    assert await response.readany() == b"b"
    assert await response.readany() == b""
    response.close()
    assert response._conn.idle_timer is None  # released: the timer is gone with it
    await client.close()


async def test_https_providers_are_verified_and_kept_alive(tmp_path: pathlib.Path) -> None:
    cert, key = self_signed_cert(tmp_path, host="127.0.0.1")
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    state = Server(json_reply())
    server = await asyncio.start_server(state.handle, "127.0.0.1", 0, ssl=server_tls)
    port = server.sockets[0].getsockname()[1]
    https = DeploymentInfo(
        id=1,
        name="d",
        kind="anthropic",
        base_url=f"https://127.0.0.1:{port}",
        api_key="sk-up",
        weight=1,
        max_concurrency=10,
    )
    try:
        untrusting = UpstreamClient()  # the system's CAs: a self-signed provider is refused
        with pytest.raises(ssl.SSLCertVerificationError):
            await untrusting.post(https, "/v1/messages", b"{}")
        client = UpstreamClient()
        client._ssl = ssl.create_default_context(cafile=str(cert))
        for _ in range(2):
            response = await client.post(https, "/v1/messages", b"{}")
            assert await response.read() == b'{"ok":true}'
        # the refused handshake never reached the server's handler; two requests, one connection
        assert state.connections == 1 and len(state.requests) == 2
        assert b"host: 127.0.0.1:%d\r\n" % port in state.requests[0]
        await client.close()
        await asyncio.sleep(0.05)  # the server's handler sees the close and returns
    finally:
        server.close()


async def test_connections_left_idle_after_a_burst_are_closed_later(serve, monkeypatch) -> None:
    monkeypatch.setattr(upstream, "KEEPALIVE_SECONDS", 0.3)
    server = await serve(json_reply())
    client = UpstreamClient()
    dep = deployment(server.port)
    first, second, third = await asyncio.gather(
        *(client.post(dep, "/v1/messages", b"{}") for _ in range(3))
    )
    assert server.connections == 3
    await first.read()
    await second.read()  # both back in the pool
    await asyncio.sleep(0.35)  # ... and now past their keep-alive
    await third.read()  # the next release closes the expired ones
    pool = client._idle[("http", "127.0.0.1", server.port)]
    assert list(pool) == [third._conn]
    assert first._conn.transport is None and second._conn.transport is None
    await client.close()


@pytest.mark.parametrize(
    ("base_url", "host_header", "prefix"),
    [
        ("https://api.anthropic.com", "api.anthropic.com", ""),
        ("https://api.anthropic.com:8443/proxy/", "api.anthropic.com:8443", "/proxy"),
        ("http://10.0.0.5:80", "10.0.0.5", ""),
        ("https://[2001:db8::1]", "[2001:db8::1]", ""),
        ("http://[2001:db8::1]:8080/v", "[2001:db8::1]:8080", "/v"),
    ],
)
def test_base_url_becomes_host_header_and_path_prefix(
    base_url: str, host_header: str, prefix: str
) -> None:
    target = UpstreamClient()._target(base_url)
    assert (target.host_header, target.path_prefix) == (host_header, prefix)
