from __future__ import annotations

# Downloads the http(s) image URLs of one API request and returns them base64-encoded.
#
# Layering, outermost first:
#   fetch_all   count limit, static URL checks for every part, parallel tasks, first error
#   _fetch_one  semaphore slot, 15 s deadline for the whole download incl. redirects,
#               mapping of transport errors to user-facing messages
#   _download   manual redirect loop (every hop re-checked), status, size, magic bytes
#   GuardedNetworkBackend (network.py)  resolve once, vet every address, connect by IP
import asyncio
import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import httpcore
import httpx

from gateway.images.content import (
    BudgetExceeded,
    ByteBudget,
    image_too_large,
    read_image_body,
)
from gateway.images.errors import (
    MESSAGE_BAD_REDIRECT,
    MESSAGE_CONNECT_FAILED,
    MESSAGE_CONNECTION_ERROR,
    DownloadMemoryFull,
    DownloadRefused,
    ImageContentError,
    ImageFetchError,
)
from gateway.images.memory import ImageMemoryBudget
from gateway.images.network import GuardedNetworkBackend, Resolver, system_resolver
from gateway.images.urls import ImageTarget, parse_image_url, resolve_redirect
from gateway.protocols.media import HEAD_BYTES, image_size

DEFAULT_MEMORY_BUDGET: Final = 256 * 1024 * 1024
REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
USER_AGENT: Final = b"EZAT-Router-ImageFetcher/1.0"
# identity: a compressed body would otherwise be a decompression bomb waiting to happen;
# a server that compresses anyway fails the magic-byte check, which is the safe outcome.
_REQUEST_HEADERS: Final = (
    (b"User-Agent", USER_AGENT),
    (b"Accept", b"image/png, image/jpeg, image/gif, image/webp"),
    (b"Accept-Encoding", b"identity"),
)


@dataclass(frozen=True, slots=True)
class FetchedImage:
    media_type: str
    data_b64: str
    size: tuple[int, int] | None = None  # (width, height) from its header, when readable


@dataclass(frozen=True, slots=True)
class ImageFetchPolicy:
    max_bytes_per_image: int = 10 * 1024 * 1024
    max_images: int = 20
    max_total_bytes: int = 32 * 1024 * 1024
    timeout_s: float = 15.0
    max_redirects: int = 3
    # Test-only: permits 127.0.0.0/8 and ::1 (on any port). Every other non-public range
    # stays refused. The gateway maps EZAT_IMAGE_ALLOW_LOOPBACK onto this; off by default.
    allow_loopback: bool = False
    # Downloads of one request running at once. 8 keeps a 20-image request to at most
    # three rounds while bounding the sockets a single request can hold.
    max_parallel: int = 8

    def __post_init__(self) -> None:
        if min(self.max_bytes_per_image, self.max_images, self.max_total_bytes) < 1:
            raise ValueError("image limits must be positive")
        if self.timeout_s <= 0 or self.max_redirects < 0 or self.max_parallel < 1:
            raise ValueError("invalid image fetch timeout, redirect or parallelism limit")


DEFAULT_POLICY: Final = ImageFetchPolicy()


def _timeout_message(timeout_s: float) -> str:
    return f"could not download the image (timed out after {timeout_s:g} s)"


def _header(response: httpcore.Response, name: bytes) -> bytes | None:
    for key, value in response.headers:
        if key.lower() == name:
            return value
    return None


def _declared_length(response: httpcore.Response) -> int | None:
    value = _header(response, b"content-length")
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


def _host_header(url: httpx.URL) -> bytes:
    # httpx's netloc keeps IPv6 brackets and a non-default port; httpcore's own default
    # Host header would drop the brackets.
    return url.netloc


def _core_url(target: ImageTarget) -> httpcore.URL:
    url = target.url
    return httpcore.URL(
        scheme=url.raw_scheme, host=url.raw_host, port=target.port, target=url.raw_path
    )


async def _cancel_and_wait(tasks: list[asyncio.Task[FetchedImage]]) -> None:
    unfinished = [task for task in tasks if not task.done()]
    for task in unfinished:
        task.cancel()
    if unfinished:
        await asyncio.gather(*unfinished, return_exceptions=True)


def _first_error(
    tasks: list[asyncio.Task[FetchedImage]], done: set[asyncio.Task[FetchedImage]]
) -> BaseException | None:
    """The error to raise: the earliest part's among those that had failed when the wait
    returned (deterministic for simultaneous failures). Every failed task's exception is
    retrieved: when a request's byte budget runs out, all its downloads fail at once, and an
    exception nobody retrieved is logged ("Task exception was never retrieved") and kept
    alive with its traceback until the task is collected."""
    first: BaseException | None = None
    for task in tasks:
        if task.cancelled():
            continue
        error = task.exception()
        if error is not None and first is None and task in done:
            first = error
    return first


class ImageFetcher:
    """Downloads request images through one pooled, SSRF-guarded HTTP/1.1 client.

    Create one per process (per event loop) and `aclose()` it on shutdown.
    """

    def __init__(
        self,
        policy: ImageFetchPolicy = DEFAULT_POLICY,
        *,
        resolver: Resolver | None = None,
        connector: httpcore.AsyncNetworkBackend | None = None,
        memory: ImageMemoryBudget | None = None,
    ) -> None:
        """`resolver` and `connector` (what opens sockets to already vetted IPs) default to
        the system resolver and httpcore's AnyIO backend; tests substitute them."""
        self._policy = policy
        # Shared by every request of the process (gateway/images/memory.py).
        self.memory = memory if memory is not None else ImageMemoryBudget(DEFAULT_MEMORY_BUDGET)
        self._backend = GuardedNetworkBackend(
            allow_loopback=policy.allow_loopback,
            resolver=resolver if resolver is not None else system_resolver,
            inner=connector,
        )
        self._pool = httpcore.AsyncConnectionPool(
            # certifi's CA bundle, independent of SSL_CERT_* environment variables.
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=30.0,
            http1=True,
            http2=False,
            retries=0,
            network_backend=self._backend,
        )

    @property
    def policy(self) -> ImageFetchPolicy:
        return self._policy

    async def aclose(self) -> None:
        await self._pool.aclose()

    async def fetch_all(
        self, refs: Sequence[tuple[str, str]], *, max_total_bytes: int | None = None
    ) -> list[FetchedImage]:
        """Download every (param, url); results in request order.

        `max_total_bytes` lowers the policy's total for this request (what still fits under the
        provider's request size limit), so an oversize request stops downloading early.

        Raises ImageFetchError for the first part that fails (the remaining downloads are
        cancelled). If several have failed by the time we look, the earliest part in the
        request wins, which keeps the message deterministic for simultaneous failures.
        """
        policy = self._policy
        if len(refs) > policy.max_images:
            raise ImageFetchError(
                refs[policy.max_images][0],
                f"too many image URLs (at most {policy.max_images} per request)",
            )
        # Cheap static checks for all parts first: a bad scheme in part 7 should not cost
        # six downloads.
        targets: list[ImageTarget] = []
        for param, url in refs:
            try:
                targets.append(parse_image_url(url, allow_loopback=policy.allow_loopback))
            except DownloadRefused as exc:
                raise ImageFetchError(param, exc.message) from None
        if not targets:
            return []

        total = policy.max_total_bytes
        if max_total_bytes is not None:
            total = max(1, min(total, max_total_bytes))
        budget = ByteBudget(total)
        slots = asyncio.Semaphore(policy.max_parallel)
        tasks = [
            asyncio.create_task(self._fetch_one(param, target, budget, slots))
            for (param, _url), target in zip(refs, targets, strict=True)
        ]
        try:
            done, _pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            # Runs on failure and when our caller is cancelled (client went away): the
            # siblings are cancelled and awaited, so no download outlives its request.
            await _cancel_and_wait(tasks)
        error = _first_error(tasks, done)
        if error is not None:
            # The raised error's traceback keeps this frame: it must not keep the tasks (and
            # through their exceptions, their frames) too.
            tasks.clear()
            done.clear()
            raise error
        return [task.result() for task in tasks]

    async def _fetch_one(
        self,
        param: str,
        target: ImageTarget,
        budget: ByteBudget,
        slots: asyncio.Semaphore,
    ) -> FetchedImage:
        timeout_s = self._policy.timeout_s
        async with slots:  # waiting for a slot does not count against the 15 s
            try:
                async with asyncio.timeout(timeout_s):
                    return await self._download(target, budget)
            except TimeoutError:
                error = ImageFetchError(param, _timeout_message(timeout_s))
            except BudgetExceeded as exc:
                error = ImageFetchError(param, exc.message, status=413)
            except DownloadMemoryFull as exc:
                error = ImageFetchError(param, exc.message, status=503)
            except DownloadRefused as exc:
                error = ImageFetchError(param, exc.message)
            except httpcore.TimeoutException:
                error = ImageFetchError(param, _timeout_message(timeout_s))
            except httpcore.ConnectError:
                error = ImageFetchError(param, MESSAGE_CONNECT_FAILED)
            except (httpcore.NetworkError, httpcore.ProtocolError):
                error = ImageFetchError(param, MESSAGE_CONNECTION_ERROR)
        # Raised outside the handlers, so it carries no __context__: the original exception's
        # traceback holds the download's frames (its response stream, the last network
        # buffers), which would otherwise live as long as the error does.
        raise error

    async def _download(self, first: ImageTarget, budget: ByteBudget) -> FetchedImage:
        policy = self._policy
        # httpcore's own timeouts are a backstop for the asyncio deadline around us.
        timeouts = dict.fromkeys(("connect", "read", "write", "pool"), policy.timeout_s)
        target = first
        for hop in range(policy.max_redirects + 1):
            async with self._pool.stream(
                "GET",
                _core_url(target),
                headers=[(b"Host", _host_header(target.url)), *_REQUEST_HEADERS],
                extensions={"timeout": timeouts},
            ) as response:
                status = response.status
                if status in REDIRECT_STATUSES:
                    if hop == policy.max_redirects:
                        raise ImageContentError(
                            f"too many redirects (at most {policy.max_redirects})"
                        )
                    location = _header(response, b"location")
                    if location is None:
                        raise ImageContentError(MESSAGE_BAD_REDIRECT)
                    # Leaving the block closes the response without reading its body.
                    next_target = resolve_redirect(
                        target,
                        location.decode("latin-1").strip(),
                        allow_loopback=policy.allow_loopback,
                    )
                else:
                    return await self._read_image(response, budget)
            target = next_target
        raise AssertionError("unreachable: the loop returns or raises on its last hop")

    async def _read_image(self, response: httpcore.Response, budget: ByteBudget) -> FetchedImage:
        policy = self._policy
        if response.status != 200:
            raise ImageContentError(f"could not download the image (HTTP {response.status})")
        declared = _declared_length(response)
        if declared is not None:
            # Refuse before reading a byte when the server already tells us it is too big.
            if declared > policy.max_bytes_per_image:
                raise image_too_large(policy.max_bytes_per_image)
            budget.ensure_available(declared)
        data, media_type = await read_image_body(
            response.aiter_stream(),
            max_bytes=policy.max_bytes_per_image,
            budget=budget,
            in_flight=self.memory.in_flight,
        )
        return FetchedImage(
            media_type=media_type,
            data_b64=base64.b64encode(data).decode("ascii"),
            size=image_size(data[:HEAD_BYTES]),
        )
