"""The raw ASGI request wrapper: body limits, request ids, and nothing kept after the request."""

from __future__ import annotations

import asyncio
import gc

import pytest

from gateway.errors import GatewayError
from gateway.http import ApiRequest


def scope(headers: dict[str, str] | None = None) -> dict:
    return {
        "type": "http",
        "method": "POST",
        "path": "/v1/messages",
        "headers": [(k.encode(), v.encode()) for k, v in (headers or {}).items()],
    }


def receiver(*chunks: bytes):  # type: ignore[no-untyped-def]
    messages = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]
    gone = asyncio.Event()

    async def receive() -> dict:
        if messages:
            return messages.pop(0)
        await gone.wait()
        return {"type": "http.disconnect"}

    return receive


async def test_body_in_chunks_and_the_size_limit() -> None:
    request = ApiRequest(scope(), receiver(b"ab", b"cd"))
    assert await request.read_body(4) == b"abcd"
    with pytest.raises(GatewayError) as raised:
        await ApiRequest(scope(), receiver(b"ab", b"cde")).read_body(4)
    assert raised.value.status == 413
    with pytest.raises(GatewayError):  # refused from the header, before reading anything
        await ApiRequest(scope({"content-length": "5"}), receiver(b"")).read_body(4)


@pytest.mark.parametrize(
    ("sent", "kept"), [("abc-1.2:3_x", True), ("bad id", False), ("x" * 129, False)]
)
def test_request_id(sent: str, kept: bool) -> None:
    request = ApiRequest(scope({"x-request-id": sent}), receiver(b""))
    assert (request.request_id == sent) is kept
    assert request.request_id.startswith("req_") or kept


async def test_close_frees_the_body_and_leaves_no_cycle_behind() -> None:
    """A 100k-token stream's body must not wait for the cycle collector (memory stays flat)."""
    request = ApiRequest(scope(), receiver(b"x" * 400_000))
    await request.read_body(1 << 20)
    request.watch_disconnect()
    await asyncio.sleep(0)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        request.close()
        assert request.body == b""
        await asyncio.sleep(0.01)  # let the watcher task finish its cancellation
        del request
        gc.collect()
        # Freed by reference counting already: nothing of the request waited for the collector.
        assert not [o for o in gc.garbage if isinstance(o, ApiRequest)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
