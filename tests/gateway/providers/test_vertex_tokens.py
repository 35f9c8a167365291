"""Vertex OAuth2 tokens (google-auth against the simulator's token endpoint): fetched once,
refreshed in the background before they expire, and a failed refresh cools the deployment down."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from catalog.snapshot import DeploymentInfo
from gateway.providers import PlatformAuthError
from gateway.providers.vertex.google_tokens import TokenCache
from gateway.routing import health
from simulator.platforms import PlatformSim
from simulator.testing import SimulatorThread


def deployment(sim: SimulatorThread, dep_id: int) -> DeploymentInfo:
    return DeploymentInfo(
        id=dep_id,
        name=f"vertex-{dep_id}",
        kind="vertex",
        base_url=sim.url + "/v1",
        api_key="",
        weight=1,
        max_concurrency=10,
        region="us-east5",
        project="ezat-token-test",
        secrets={"service_account_json": json.dumps(sim.service_account)},
    )


async def until(condition, seconds: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


@pytest.fixture
def sim() -> SimulatorThread:
    platform = PlatformSim(platform="vertex", region="us-east5", project="ezat-token-test")
    with SimulatorThread(platform=platform) as started:
        yield started


def test_a_token_is_refreshed_in_the_background_before_it_expires(
    sim: SimulatorThread, settings: pytest.FixtureRequest
) -> None:
    settings.EZAT_VERTEX_TOKEN_REFRESH_MARGIN = 3.0  # type: ignore[attr-defined]
    settings.REDIS_URL = ""  # type: ignore[attr-defined]
    sim.platform_state(token_ttl=5)
    dep = deployment(sim, 91_001)

    async def scenario() -> None:
        cache = TokenCache()
        try:
            issued_at = time.time()
            first = await cache.token(dep)
            assert first.startswith("ya29.sim-")
            assert await cache.token(dep) == first  # cached: no second fetch
            assert sim.platform_state()["tokens_issued"] == 1
            # No request asks for it: the refresh runs on its own, before the first expires.
            await until(lambda: sim.platform_state()["tokens_issued"] == 2)
            assert time.time() < issued_at + 5
            second = await cache.token(dep)
            assert second != first
        finally:
            cache.clear()

    asyncio.run(scenario())


def test_a_failed_refresh_cools_the_deployment_down(
    sim: SimulatorThread, settings: pytest.FixtureRequest
) -> None:
    # Due for refresh after 2 s, valid for 12 s: room for a loaded machine between the steps.
    settings.EZAT_VERTEX_TOKEN_REFRESH_MARGIN = 10.0  # type: ignore[attr-defined]
    settings.EZAT_VERTEX_TOKEN_RETRY_SECONDS = 0.5  # type: ignore[attr-defined]
    settings.REDIS_URL = ""  # type: ignore[attr-defined]
    sim.platform_state(token_ttl=12)
    dep = deployment(sim, 91_002)

    async def scenario() -> None:
        cache = TokenCache()
        health.reset()
        try:
            first = await cache.token(dep)
            sim.platform_state(token_fail=True)
            await until(lambda: health.is_cooling(dep.id))
            # Still valid: requests keep using it while the refresh is retried aside.
            assert await cache.token(dep) == first
            # Expired with no new one: the attempt fails (and fails over), it never hangs.
            await until(lambda: time.time() > cache._sources[next(iter(cache._sources))].expires_at)
            with pytest.raises(PlatformAuthError):
                await cache.token(dep)
            sim.platform_state(token_fail=False)
            await until(lambda: cache._sources[next(iter(cache._sources))].token != first)
        finally:
            cache.clear()
            health.reset()

    asyncio.run(scenario())
