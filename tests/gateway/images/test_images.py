from __future__ import annotations

# ImageFetcher against a real HTTP server on 127.0.0.1 (loopback only; never another host).
# Refusals of other addresses must happen before any connection, which these tests check
# through a loopback-only tripwire connector, timing and messages — no packet leaves the host.
import base64
import pathlib
import ssl
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from gateway.images import (
    DEFAULT_POLICY,
    FetchedImage,
    ImageFetcher,
    ImageFetchError,
    ImageFetchPolicy,
)
from gateway.images.content import ByteBudget, image_too_large, read_image_body
from gateway.images.errors import (
    MESSAGE_BAD_REDIRECT,
    MESSAGE_BAD_SCHEME,
    MESSAGE_NOT_IMAGE,
    MESSAGE_NOT_PUBLIC,
    DownloadRefused,
    HostResolutionError,
)
from gateway.images.network import Resolver
from tests.waiting import async_wait_for

from .image_server import (
    IMAGES,
    KIB,
    PNG,
    LoopbackOnlyConnector,
    Server,
    build_app,
    self_signed_cert,
)

# The test server's slow answers take 30 s (or never end); a refusal or a deadline must come
# far sooner. The margin is for a loaded machine: a wait on the server would blow it.
PROMPT = 10.0


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    state = Server(base="", port=0)
    runner = web.AppRunner(build_app(state), shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)  # loopback only
    await site.start()
    state.port = runner.addresses[0][1]
    state.base = f"http://127.0.0.1:{state.port}"
    yield state
    await runner.cleanup()


def _policy(**overrides: object) -> ImageFetchPolicy:
    values: dict[str, object] = {"allow_loopback": True, "timeout_s": 5.0}
    values.update(overrides)
    return ImageFetchPolicy(**values)  # type: ignore[arg-type]


@pytest.fixture
def connector() -> LoopbackOnlyConnector:
    return LoopbackOnlyConnector()


@pytest.fixture
async def fetcher(connector: LoopbackOnlyConnector) -> AsyncIterator[ImageFetcher]:
    instance = ImageFetcher(_policy(), connector=connector)
    yield instance
    await instance.aclose()


async def _fetch_error(fetcher: ImageFetcher, refs: list[tuple[str, str]]) -> ImageFetchError:
    with pytest.raises(ImageFetchError) as info:
        await fetcher.fetch_all(refs)
    return info.value


async def _with(
    policy: ImageFetchPolicy,
    refs: list[tuple[str, str]],
    *,
    resolver: Resolver | None = None,
    connector: LoopbackOnlyConnector | None = None,
) -> object:
    connector = connector if connector is not None else LoopbackOnlyConnector()
    instance = ImageFetcher(policy, resolver=resolver, connector=connector)
    try:
        return await instance.fetch_all(refs)
    except ImageFetchError as exc:
        return exc
    finally:
        await instance.aclose()


# --- content -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(IMAGES))
async def test_formats_are_recognised_by_magic(
    fetcher: ImageFetcher, server: Server, kind: str
) -> None:
    body, media_type = IMAGES[kind]
    [image] = await fetcher.fetch_all([("messages[0].content[1]", server.url(f"/img/{kind}"))])
    assert image == FetchedImage(media_type=media_type, data_b64=base64.b64encode(body).decode())


async def test_order_is_kept(fetcher: ImageFetcher, server: Server) -> None:
    kinds = ["webp", "png", "gif", "jpeg", "png"]
    refs = [(f"p{i}", server.url(f"/img/{kind}")) for i, kind in enumerate(kinds)]
    images = await fetcher.fetch_all(refs)
    assert [image.media_type for image in images] == [IMAGES[k][1] for k in kinds]
    assert await fetcher.fetch_all([]) == []


@pytest.mark.parametrize("path", ["/text", "/tiny"])
async def test_wrong_magic_is_refused(fetcher: ImageFetcher, server: Server, path: str) -> None:
    error = await _fetch_error(fetcher, [("img", server.url(path))])
    assert (error.param, error.message) == ("img", MESSAGE_NOT_IMAGE)
    assert str(error) == MESSAGE_NOT_IMAGE


@pytest.mark.parametrize("code", [404, 403, 500, 204])
async def test_http_errors(fetcher: ImageFetcher, server: Server, code: int) -> None:
    error = await _fetch_error(fetcher, [("img", server.url(f"/status/{code}"))])
    assert error.message == f"could not download the image (HTTP {code})"


async def test_connection_refused(fetcher: ImageFetcher, server: Server) -> None:
    # Port 1 on loopback: nothing listens, so the connect itself fails.
    error = await _fetch_error(fetcher, [("img", "http://127.0.0.1:1/x.png")])
    assert error.message == "could not download the image (connection failed)"


# --- sizes ---------------------------------------------------------------------------------


def test_default_limits_match_the_product_docs() -> None:
    assert ImageFetchPolicy() == DEFAULT_POLICY
    assert DEFAULT_POLICY.max_bytes_per_image == 10 * 1024 * 1024
    assert DEFAULT_POLICY.max_total_bytes == 32 * 1024 * 1024
    assert DEFAULT_POLICY.max_images == 20
    assert DEFAULT_POLICY.timeout_s == 15.0
    assert DEFAULT_POLICY.max_redirects == 3
    assert DEFAULT_POLICY.allow_loopback is False
    assert image_too_large(DEFAULT_POLICY.max_bytes_per_image).message == (
        "the image is larger than 10 MB"
    )


async def test_exact_limit_is_accepted_one_more_byte_is_not(server: Server) -> None:
    policy = _policy(max_bytes_per_image=100 * KIB)
    ok = await _with(policy, [("a", server.url(f"/sized/{100 * KIB}"))])
    assert isinstance(ok, list)
    assert len(base64.b64decode(ok[0].data_b64)) == 100 * KIB
    error = await _with(policy, [("a", server.url(f"/sized/{100 * KIB + 1}"))])
    assert isinstance(error, ImageFetchError)
    assert error.message == "the image is larger than 100 KB"


async def _streamed(server: Server) -> bool:
    return bool(server.streamed)


async def test_endless_body_stops_at_the_limit(server: Server) -> None:
    started = time.monotonic()
    error = await _with(_policy(max_bytes_per_image=256 * KIB), [("a", server.url("/endless"))])
    assert isinstance(error, ImageFetchError)
    assert error.message == "the image is larger than 256 KB"
    assert time.monotonic() - started < 30  # not the minutes 125 MiB would take
    # The server notices the hang-up and records how much it streamed.
    await async_wait_for(lambda: _streamed(server), 60, what="the server to see the hang-up")
    # Far below the 125 MiB on offer: the client stopped reading and closed the socket
    # (the slack is kernel socket buffers on loopback, not our memory).
    assert server.streamed and server.streamed[0] < 32 * 1024 * KIB


async def test_declared_oversize_is_refused_before_reading(server: Server) -> None:
    started = time.monotonic()
    error = await _with(_policy(), [("a", server.url("/declared-huge"))])
    assert isinstance(error, ImageFetchError)
    assert error.message == "the image is larger than 10 MB"
    assert time.monotonic() - started < PROMPT  # the server holds the body back for 30 s


async def test_reader_never_buffers_past_the_limit() -> None:
    pulled = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal pulled
        while True:
            pulled += 1
            yield PNG + b"\x00" * (300 - len(PNG)) if pulled == 1 else b"\x00" * 300

    with pytest.raises(DownloadRefused) as info:
        await read_image_body(chunks(), max_bytes=1000, budget=ByteBudget(10_000))
    assert info.value.message == "the image is larger than 1000 bytes"
    assert pulled == 4  # 3 × 300 accepted; the 4th would exceed and is not appended


async def test_reader_rejects_non_images_early() -> None:
    pulled = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal pulled
        while True:
            pulled += 1
            yield b"<html>" * 100

    with pytest.raises(DownloadRefused) as info:
        await read_image_body(chunks(), max_bytes=10**9, budget=ByteBudget(10**9))
    assert info.value.message == MESSAGE_NOT_IMAGE
    assert pulled == 1


async def test_request_budget_is_shared(server: Server) -> None:
    policy = _policy(max_bytes_per_image=200 * KIB, max_total_bytes=300 * KIB)
    refs = [(f"p{i}", server.url(f"/sized/{150 * KIB}")) for i in range(3)]
    error = await _with(policy, refs)
    assert isinstance(error, ImageFetchError)
    assert error.message == "image downloads exceed 300 KB for this request"
    ok = await _with(policy, refs[:2])
    assert isinstance(ok, list) and len(ok) == 2


def test_default_budget_message() -> None:
    budget = ByteBudget(DEFAULT_POLICY.max_total_bytes)
    with pytest.raises(DownloadRefused) as info:
        budget.take(DEFAULT_POLICY.max_total_bytes + 1)
    assert info.value.message == "image downloads exceed 32 MB for this request"


async def test_too_many_urls(fetcher: ImageFetcher, server: Server) -> None:
    refs = [(f"messages[0].content[{i}]", server.url("/img/png")) for i in range(21)]
    error = await _fetch_error(fetcher, refs)
    assert error.param == "messages[0].content[20]"
    assert error.message == "too many image URLs (at most 20 per request)"
    assert server.hits == []  # refused before any download
    assert len(await fetcher.fetch_all(refs[:20])) == 20


# --- time ----------------------------------------------------------------------------------


async def test_slow_response_times_out(server: Server) -> None:
    started = time.monotonic()
    error = await _with(_policy(timeout_s=0.3), [("a", server.url("/slow/30"))])
    assert isinstance(error, ImageFetchError)
    assert error.message == "could not download the image (timed out after 0.3 s)"
    assert time.monotonic() - started < PROMPT


async def test_deadline_covers_the_whole_download_not_each_read(server: Server) -> None:
    started = time.monotonic()
    error = await _with(_policy(timeout_s=0.5), [("a", server.url("/drip"))])
    assert isinstance(error, ImageFetchError)
    assert error.message == "could not download the image (timed out after 0.5 s)"
    assert time.monotonic() - started < PROMPT  # the drip lasts 30 s


async def test_downloads_run_in_parallel(fetcher: ImageFetcher, server: Server) -> None:
    refs = [(f"p{i}", server.url("/slow/1")) for i in range(6)]
    images = await fetcher.fetch_all(refs)
    assert len(images) == 6
    assert server.most_in_flight == 6  # all six were being answered at once


async def test_first_failure_cancels_the_rest(fetcher: ImageFetcher, server: Server) -> None:
    refs = [("slow", server.url("/slow/30")), ("broken", server.url("/status/404"))]
    started = time.monotonic()
    error = await _fetch_error(fetcher, refs)
    assert error.param == "broken"
    assert time.monotonic() - started < PROMPT  # the slow one was not waited for


async def test_static_errors_come_before_any_download(
    fetcher: ImageFetcher, server: Server
) -> None:
    refs = [("a", server.url("/img/png")), ("b", "ftp://example.com/x.png")]
    error = await _fetch_error(fetcher, refs)
    assert (error.param, error.message) == ("b", MESSAGE_BAD_SCHEME)
    assert server.hits == []


# --- redirects -----------------------------------------------------------------------------


async def test_three_redirects_are_followed(fetcher: ImageFetcher, server: Server) -> None:
    [image] = await fetcher.fetch_all([("a", server.url("/redirect/3"))])
    assert image.media_type == "image/png"
    assert server.hits == ["/redirect/3", "/redirect/2", "/redirect/1", "/redirect/0"]


async def test_fourth_redirect_is_refused(fetcher: ImageFetcher, server: Server) -> None:
    error = await _fetch_error(fetcher, [("a", server.url("/redirect/4"))])
    assert error.message == "too many redirects (at most 3)"
    assert "/redirect/0" not in server.hits


async def test_redirect_without_location(fetcher: ImageFetcher, server: Server) -> None:
    error = await _fetch_error(fetcher, [("a", server.url("/no-location"))])
    assert error.message == MESSAGE_BAD_REDIRECT


@pytest.mark.parametrize(
    "location",
    [
        "http://10.0.0.1/x",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/",
        "http://[fd00::1]/",
        "http://0xa9fea9fe/",
        "http://100.64.0.1/",
    ],
)
async def test_redirect_to_private_host_is_refused_without_connecting(
    fetcher: ImageFetcher, connector: LoopbackOnlyConnector, server: Server, location: str
) -> None:
    error = await _fetch_error(fetcher, [("a", server.url(f"/to?u={location}"))])
    assert error.message == MESSAGE_NOT_PUBLIC
    # Only the loopback test server was ever dialled.
    assert connector.attempts == [("127.0.0.1", server.port)]


async def test_redirect_to_name_resolving_to_metadata_is_refused(server: Server) -> None:
    looked_up: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        looked_up.append(host)
        return ["169.254.169.254"]

    connector = LoopbackOnlyConnector()
    error = await _with(
        _policy(),
        [("a", server.url("/to?u=http://metadata.internal/"))],
        resolver=resolver,
        connector=connector,
    )
    assert isinstance(error, ImageFetchError)
    assert error.message == MESSAGE_NOT_PUBLIC
    assert looked_up == ["metadata.internal"]
    assert connector.attempts == [("127.0.0.1", server.port)]


# --- loopback switch and names ---------------------------------------------------------------


async def test_loopback_server_refused_when_switch_is_off(server: Server) -> None:
    connector = LoopbackOnlyConnector()
    for url in (server.url("/img/png"), f"http://[::1]:{server.port}/img/png"):
        error = await _with(ImageFetchPolicy(), [("a", url)], connector=connector)
        assert isinstance(error, ImageFetchError)
        assert error.message == MESSAGE_NOT_PUBLIC
    assert connector.attempts == []
    assert server.hits == []


async def test_localhost_name_refused_when_switch_is_off(server: Server) -> None:
    # Port 80 so the port rule does not answer first; nothing needs to listen there because
    # the resolved 127.0.0.1 / ::1 is refused before connecting.
    connector = LoopbackOnlyConnector()
    error = await _with(
        ImageFetchPolicy(), [("a", "http://localhost/img/png")], connector=connector
    )
    assert isinstance(error, ImageFetchError)
    assert error.message == MESSAGE_NOT_PUBLIC
    assert connector.attempts == []


async def test_localhost_name_allowed_with_switch(fetcher: ImageFetcher, server: Server) -> None:
    # "localhost" may resolve to ::1 first; nothing listens there, so this also exercises
    # the fallback to the next vetted address.
    [image] = await fetcher.fetch_all([("a", f"http://localhost:{server.port}/img/png")])
    assert image.media_type == "image/png"


async def test_connects_to_vetted_ip_but_keeps_the_host_name(server: Server) -> None:
    async def resolver(host: str, port: int) -> list[str]:
        return ["127.0.0.1"] if host == "images.test" else []

    result = await _with(
        _policy(), [("a", f"http://images.test:{server.port}/host")], resolver=resolver
    )
    assert isinstance(result, list)
    assert server.hosts == [f"images.test:{server.port}"]


async def test_name_with_any_non_public_answer_is_refused(server: Server) -> None:
    # Filtering would connect to 127.0.0.1 and succeed; the policy refuses the whole name.
    async def resolver(host: str, port: int) -> list[str]:
        return ["127.0.0.1", "10.0.0.1"]

    connector = LoopbackOnlyConnector()
    error = await _with(
        _policy(),
        [("a", f"http://mixed.test:{server.port}/host")],
        resolver=resolver,
        connector=connector,
    )
    assert isinstance(error, ImageFetchError)
    assert error.message == MESSAGE_NOT_PUBLIC
    assert connector.attempts == []
    assert server.hits == []


async def test_unresolvable_name(server: Server) -> None:
    async def resolver(host: str, port: int) -> list[str]:
        raise HostResolutionError()

    error = await _with(_policy(), [("a", "http://nowhere.test/x.png")], resolver=resolver)
    assert isinstance(error, ImageFetchError)
    assert error.message == "could not download the image (host name not found)"


# --- TLS: the vetted IP is dialled, but SNI and certificate checks use the name -------------


async def test_tls_uses_the_name_for_sni_and_verifies_the_certificate(
    tmp_path: pathlib.Path,
) -> None:
    cert_path, key_path = self_signed_cert(tmp_path)
    server_names: list[str | None] = []
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)
    context.sni_callback = lambda _sock, name, _ctx: server_names.append(name)

    state = Server(base="", port=0)
    runner = web.AppRunner(build_app(state), shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]

    async def resolver(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    connector = LoopbackOnlyConnector()
    try:
        error = await _with(
            _policy(),
            [("a", f"https://images.test:{port}/img/png")],
            resolver=resolver,
            connector=connector,
        )
    finally:
        await runner.cleanup()
    # Dialled by IP, introduced by name; the self-signed certificate is not trusted.
    assert connector.attempts == [("127.0.0.1", port)]
    assert server_names == ["images.test"]
    assert isinstance(error, ImageFetchError)
    assert error.message == "could not download the image (connection failed)"
    assert state.hits == []
