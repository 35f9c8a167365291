"""When one image of a request fails, its sibling downloads end with it (issue 31, item 6).

The audit's case: one image of a request went over the request's 24 MB (a 413) while the others
went on; the log showed 58 "Task exception was never retrieved" from `ImageFetcher._fetch_one`,
and memory climbed from 81 MiB to 2,046 MiB over 140 refused requests. Measured here without
RSS or timing: what the server sees (hang-ups), the tasks left, the unretrieved exceptions, the
process's bytes in flight, and the bytes Python still holds (tracemalloc, with the cyclic
garbage collector off: production collects by object counts, which a few large buffers never
trigger, so buffers kept alive by an exception's traceback stay until a collection).
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from gateway.images import ImageFetcher, ImageFetchError, ImageFetchPolicy
from tests.waiting import async_wait_for

from .image_server import KIB, LoopbackOnlyConnector, Server, build_app

MIB = 1024 * KIB


def _download_tasks() -> list[asyncio.Task[object]]:
    """The fetcher's tasks still alive (the test server's own tasks share the loop)."""
    return [
        t
        for t in asyncio.all_tasks()
        if getattr(t.get_coro(), "__qualname__", "").startswith("ImageFetcher.")
    ]


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    state = Server(base="", port=0)
    runner = web.AppRunner(build_app(state), shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.port = runner.addresses[0][1]
    state.base = f"http://127.0.0.1:{state.port}"
    yield state
    await runner.cleanup()


def _client_side() -> tracemalloc.Snapshot:
    """What Python holds now, without the test server's own buffers (the bodies it is still
    sending are not the client's)."""
    return tracemalloc.take_snapshot().filter_traces(
        (
            tracemalloc.Filter(False, "*/aiohttp/*"),
            tracemalloc.Filter(False, "*/tests/gateway/images/image_server.py"),
        )
    )


def _policy() -> ImageFetchPolicy:
    # A request's images may total 3 MiB; each of the large ones fits alone, two do not.
    return ImageFetchPolicy(
        allow_loopback=True,
        timeout_s=60.0,
        max_bytes_per_image=4 * MIB,
        max_total_bytes=3 * MIB,
        max_parallel=8,
    )


def _refs(server: Server) -> list[tuple[str, str]]:
    large = [(f"large{i}", server.url(f"/sized/{2 * MIB}")) for i in range(3)]
    slow = [(f"slow{i}", server.url("/stall")) for i in range(4)]
    return [*slow, *large]


async def test_a_refused_image_cancels_and_awaits_its_siblings(server: Server) -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    fetcher = ImageFetcher(_policy(), connector=LoopbackOnlyConnector())
    try:
        with pytest.raises(ImageFetchError) as info:
            await fetcher.fetch_all(_refs(server))
        assert info.value.status == 413
        del info  # its traceback would keep the request's frames (and tasks) alive
        # Nothing of the request outlives it: no task left, no byte in flight.
        assert _download_tasks() == []
        in_flight = fetcher.memory.in_flight
        assert (in_flight.bytes, in_flight.downloads) == (0, 0)

        # The slow siblings were cancelled: the server sees every one hang up.
        async def all_hung_up() -> bool:
            return server.hung_up == 4

        await async_wait_for(all_hung_up, what="every slow sibling hung up")
        assert server.stalling == 0
        # Siblings that fail together (every one a 404; all over the byte budget at once):
        # each failure is retrieved, not only the one raised.
        for path in ("/status/404", f"/sized/{2 * MIB}"):
            for _ in range(3):
                with pytest.raises(ImageFetchError):
                    await fetcher.fetch_all([(f"p{i}", server.url(path)) for i in range(8)])
    finally:
        await fetcher.aclose()
    gc.collect()  # a task whose exception nobody retrieved reports it when it is freed
    await asyncio.sleep(0)
    never = [c for c in reported if "never retrieved" in str(c.get("message"))]
    assert never == [], never


async def test_repeated_refused_requests_hold_no_memory(server: Server) -> None:
    fetcher = ImageFetcher(_policy(), connector=LoopbackOnlyConnector())
    refs = [(f"large{i}", server.url(f"/sized/{2 * MIB}")) for i in range(4)]
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        for _ in range(3):  # warm-up: the pool's connections and buffers exist
            with pytest.raises(ImageFetchError):
                await fetcher.fetch_all(refs)
        baseline = _client_side()
        for _ in range(20):
            with pytest.raises(ImageFetchError) as info:
                await fetcher.fetch_all(refs)
            assert info.value.status == 413
            del info
            in_flight = fetcher.memory.in_flight
            assert (in_flight.bytes, in_flight.downloads) == (0, 0)
        after = _client_side()
    finally:
        tracemalloc.stop()
        gc.enable()
        await fetcher.aclose()
    # Each refused request downloaded ~3 MiB before it was refused: kept alive, 20 of them
    # would hold ~60 MiB. What remains is bookkeeping, not image bytes.
    held = sum(stat.size_diff for stat in after.compare_to(baseline, "filename"))
    top = [str(stat) for stat in after.compare_to(baseline, "lineno")[:5]]
    assert held < 2 * MIB, (f"{held / MIB:.1f} MiB still held", top)
