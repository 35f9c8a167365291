"""The 413 for a large body states the limit exactly (issue 17, item 7): a limit of 1000 bytes
said "larger than 0 MB" when the message divided by a mebibyte and rounded down."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.errors import GatewayError
from gateway.http import ApiRequest
from gateway.sizes import format_size


@pytest.mark.parametrize(
    ("limit", "shown"),
    [
        (1000, "1000 bytes"),
        (1, "1 bytes"),  # exact beats pretty
        (1536, "1536 bytes"),
        (256 * 1024, "256 KB"),
        (32 * 1024 * 1024, "32 MB"),
        (3 * 1024 * 1024 + 1, "3145729 bytes"),
    ],
)
def test_sizes_are_exact(limit: int, shown: str) -> None:
    assert format_size(limit) == shown


def _request(body: bytes, *, declared: bool) -> ApiRequest:
    chunks = [body[:600], body[600:]]

    async def receive() -> dict[str, Any]:
        chunk = chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    headers = [(b"content-length", str(len(body)).encode())] if declared else []
    return ApiRequest({"method": "POST", "path": "/v1/messages", "headers": headers}, receive)


@pytest.mark.parametrize("declared", [True, False])
def test_a_body_over_a_1000_byte_limit_says_1000_bytes(declared: bool) -> None:
    request = _request(b"x" * 1001, declared=declared)
    with pytest.raises(GatewayError) as raised:
        asyncio.run(request.read_body(1000))
    assert raised.value.status == 413
    assert raised.value.message == "request body is larger than 1000 bytes"
