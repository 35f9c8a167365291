"""Webhook URL checks and delivery, with the same address rules as image downloads.

Save time: the URL's form, scheme, port and every address its host resolves to must be public
(`gateway.images` rules). Delivery time: the connection goes through the image downloader's
guarded network backend, which resolves once, connects to the vetted address itself and
re-checks the peer, so a DNS answer that changed since saving cannot reach inside.
Redirects are not followed (a redirect is a failed delivery).
"""

from __future__ import annotations

import asyncio
import socket

import httpcore
import httpx
from django.conf import settings

from gateway.images.addresses import is_allowed_address, parse_ip
from gateway.images.errors import DownloadRefused
from gateway.images.network import GuardedNetworkBackend
from gateway.images.urls import parse_image_url

TIMEOUT_S = 10.0
MAX_ERROR = 300


class WebhookURLError(ValueError):
    pass


class DeliveryFailed(Exception):
    """The receiver did not answer 2xx (or could not be reached); Celery retries."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the receiver's HTTP status, when it answered


def allow_loopback() -> bool:
    # Test-only switch, like EZAT_IMAGE_ALLOW_LOOPBACK: lets a test receiver on 127.0.0.1 in.
    return bool(getattr(settings, "EZAT_WEBHOOK_ALLOW_LOOPBACK", False))


def check_webhook_url(raw: str) -> str:
    """The URL, or WebhookURLError with a message for the form."""
    loopback = allow_loopback()
    try:
        target = parse_image_url(raw, allow_loopback=loopback)
    except DownloadRefused as exc:
        raise WebhookURLError(f"Webhook URL refused: {exc.message}.") from None
    host = target.url.host
    literal = parse_ip(host.partition("%")[0])
    if literal is not None:
        return raw  # literal hosts were judged by parse_image_url
    try:
        infos = socket.getaddrinfo(host, target.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise WebhookURLError("Webhook URL refused: its host name does not resolve.") from None
    for info in infos:
        address = parse_ip(str(info[4][0]))
        if address is None or not is_allowed_address(address, allow_loopback=loopback):
            raise WebhookURLError(
                "Webhook URL refused: the address is not public "
                "(private, loopback and link-local addresses are not allowed)."
            )
    return raw


async def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    target = parse_image_url(url, allow_loopback=allow_loopback())
    backend = GuardedNetworkBackend(allow_loopback=allow_loopback())
    async with httpcore.AsyncConnectionPool(
        ssl_context=httpx.create_ssl_context(trust_env=False),
        network_backend=backend,
        http1=True,
        http2=False,
    ) as pool:
        core_url = httpcore.URL(
            scheme=target.url.raw_scheme,
            host=target.url.raw_host,
            port=target.port,
            target=target.url.raw_path,
        )
        request_headers = [
            (b"Host", target.url.netloc),
            (b"Content-Type", b"application/json"),
            (b"User-Agent", b"EZAT-Router-Alerts/1"),
            *((k.encode(), v.encode()) for k, v in headers.items()),
        ]
        response = await pool.request(
            "POST",
            core_url,
            headers=request_headers,
            content=body,
            extensions={
                "timeout": {
                    "connect": TIMEOUT_S,
                    "read": TIMEOUT_S,
                    "write": TIMEOUT_S,
                    "pool": TIMEOUT_S,
                }
            },
        )
        return response.status


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    """POST once; the receiver's 2xx status, or DeliveryFailed."""
    try:
        status = asyncio.run(_post(url, body, headers))
    except DownloadRefused as exc:
        raise DeliveryFailed(f"refused: {exc.message}") from None
    except (httpcore.TimeoutException, TimeoutError):
        raise DeliveryFailed("timed out") from None
    except (httpcore.NetworkError, httpcore.ProtocolError, OSError) as exc:
        raise DeliveryFailed(f"connection failed: {type(exc).__name__}") from None
    if not 200 <= status < 300:
        raise DeliveryFailed(f"receiver answered HTTP {status}", status)
    return status
