"""The exchange over a chain of models, against real simulators and the real in-process limiter:
a model at capacity or cooling down is passed over for the next one, the hold is the dearest
model's, and a single model is still tried when cooling (cooldowns are a preference). Also the
drain after a disconnect at the first token, whose usage is in the part of the read not split yet.

The end-to-end behaviour through the SDKs is in tests/gateway/routing/test_model_fallbacks.py; these cases
need slots and cooldowns set exactly, which the shared e2e stack cannot do without filling a
serve-all deployment's hundred slots.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest

from accounts.keycache import KeyInfo
from catalog.pricing import Prices, PriceSchedule
from catalog.snapshot import DeploymentInfo, ModelInfo, Route
from gateway import limits
from gateway.chain import Candidate, Prepared
from gateway.context import RequestContext
from gateway.errors import GatewayError
from gateway.exchange import Exchange
from gateway.limits.local import LocalLimiter
from gateway.routing import health
from gateway.upstream import client
from gateway.usage import UsageTracker
from simulator.testing import SimulatorThread
from tests.gateway.limits.conftest import StaticMoney

KEY = KeyInfo(id=7, org_id=7, prefix="ezat_sk_test", rpm_limit=1000, spend_cap_nano=None)
_ids = itertools.count(random.randrange(10**9, 2 * 10**9))  # fresh ids: fresh health state


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, SimulatorThread]]:
    started = {label: SimulatorThread().start() for label in ("a", "b")}
    try:
        yield started
    finally:
        for sim in started.values():
            sim.stop()


@pytest.fixture
async def limiter(sims: dict[str, SimulatorThread], settings: Any) -> AsyncIterator[LocalLimiter]:
    # Health stays in this process (no Redis client is made that would outlive the test's loop).
    settings.REDIS_URL = ""
    for sim in sims.values():
        sim.reset()
    money = StaticMoney()
    money.org[KEY.org_id] = 10**12
    local = LocalLimiter(money=money)
    limits._limiter = local  # the process singleton the exchange uses
    try:
        yield local
    finally:
        limits.reset_limiter()
        await client.close()  # pooled connections belong to this test's loop


def model(label: str, sim: SimulatorThread, *, output_price: int, slots: int = 100) -> ModelInfo:
    deployment = DeploymentInfo(
        id=next(_ids),
        name=f"chain-{label}",
        kind="anthropic",
        base_url=sim.url,
        api_key="",
        weight=1,
        max_concurrency=slots,
    )
    prices = Prices(
        input=1_000_000, output=output_price, cache_read=0, cache_write_5m=0, cache_write_1h=0
    )
    return ModelInfo(
        id=f"test/chain-{label}",
        name=label,
        aliases=(),
        sampling=False,
        prompt_caching=True,
        vision=True,
        pdf=True,
        tools=True,
        structured_outputs=True,
        reasoning_efforts=(),
        max_output_tokens=1000,
        context_window=100_000,
        pricing=PriceSchedule.flat(prices),
        routes=(Route(deployment, f"chain-{label}"),),
        created_at="",
    )


def body(route: Route) -> bytes:
    return orjson.dumps(
        {
            "model": route.upstream_model_id,
            "max_tokens": 16,
            "messages": [{"role": "user", "content": "Hi"}],
        }
    )


def exchange(*models: ModelInfo) -> Exchange:
    candidates = [
        Candidate(m, m.id, prepared=Prepared(body), estimate=100, max_tokens=1000) for m in models
    ]
    return Exchange(
        RequestContext(
            api="messages",
            request_id=f"req_{next(_ids)}",
            key=KEY,
            model_name=models[0].id,
            stream=False,
            session="s",
            candidates=candidates,
        )
    )


def served(sim: SimulatorThread) -> int:
    return sum(1 for r in sim.requests() if r["path"] == "/v1/messages")


async def answer(ex: Exchange) -> dict[str, Any]:
    try:
        await ex.admit(input_estimate=100, max_tokens=1000)
        return await ex.call(ex.body_for, None)
    finally:
        await ex.settle()


async def test_a_model_at_capacity_is_passed_over(
    limiter: LocalLimiter, sims: dict[str, SimulatorThread]
) -> None:
    a = model("a", sims["a"], output_price=10_000_000, slots=1)
    b = model("b", sims["b"], output_price=20_000_000)
    busy = a.routes[0].deployment
    assert await limiter.acquire_slot("someone-else", busy.id, busy.max_concurrency)
    try:
        ex = exchange(a, b)
        reply = await answer(ex)
    finally:
        await limiter.release_slot("someone-else", busy.id)
    assert reply["model"] == "chain-b"
    assert ex.model is b and ex.route is b.routes[0]
    assert [(x["model"], x["outcome"]) for x in ex.attempts] == [(a.id, "full"), (b.id, "ok")]
    assert served(sims["a"]) == 0


async def test_the_hold_is_the_dearest_models_worst_case(
    limiter: LocalLimiter, sims: dict[str, SimulatorThread]
) -> None:
    a = model("a", sims["a"], output_price=10_000_000)
    b = model("b", sims["b"], output_price=90_000_000)
    ex = exchange(a, b)
    await ex.admit(input_estimate=100, max_tokens=1000)
    try:
        assert ex.hold_nano == b.pricing.worst_case_nano(100, 1000)
        assert ex.hold_nano > a.pricing.worst_case_nano(100, 1000)
    finally:
        await ex.settle()


async def test_every_deployment_cooling_down_sends_the_request_to_the_next_model(
    limiter: LocalLimiter, sims: dict[str, SimulatorThread]
) -> None:
    a = model("a", sims["a"], output_price=10_000_000)
    b = model("b", sims["b"], output_price=10_000_000)
    health._cooling_until[a.routes[0].deployment.id] = time.time() + 60
    try:
        ex = exchange(a, b)
        assert (await answer(ex))["model"] == "chain-b"
        assert served(sims["a"]) == 0
        # Alone, a cooling model is still tried: cooldowns are a preference, not a wall.
        alone = exchange(a)
        assert (await answer(alone))["model"] == "chain-a"
    finally:
        health._cooling_until.pop(a.routes[0].deployment.id, None)


async def test_when_no_model_answers_the_last_error_is_the_answer(
    limiter: LocalLimiter, sims: dict[str, SimulatorThread]
) -> None:
    a = model("a", sims["a"], output_price=10_000_000)
    b = model("b", sims["b"], output_price=10_000_000)
    sims["a"].script({"status": 529, "times": -1})
    sims["b"].script({"status": 503, "times": -1, "message": "b is down"})
    ex = exchange(a, b)
    with pytest.raises(GatewayError) as caught:
        await answer(ex)
    assert caught.value.status == 503 and "b is down" in caught.value.message
    assert [(x["model"], x["outcome"]) for x in ex.attempts] == [
        (a.id, "http_529"),
        (b.id, "http_503"),
    ]


async def test_signed_thinking_bars_the_chain_and_says_why(
    limiter: LocalLimiter, sims: dict[str, SimulatorThread]
) -> None:
    a = model("a", sims["a"], output_price=10_000_000)
    sims["a"].script({"status": 500, "times": -1})
    ex = exchange(a)
    ex.fallbacks_barred = "the fallback models (test/chain-b) were not tried: signed thinking"
    with pytest.raises(GatewayError) as caught:
        await answer(ex)
    assert caught.value.status == 503
    assert caught.value.message.endswith(ex.fallbacks_barred)
    assert served(sims["b"]) == 0


class _ClosedWriter:
    """The client's side of a stream that left at its first token: nothing more goes out."""

    async def write(self, data: bytes) -> None:
        raise AssertionError("nothing is written after the client left")


async def test_a_client_that_leaves_at_its_first_token_pays_the_exact_output(
    sims: dict[str, SimulatorThread], limiter: LocalLimiter
) -> None:
    """The simulator sends the whole answer in one write, so the read that holds the first token
    holds `message_delta` (the exact output) too; that part is split only after the first token
    went out. The drain after a disconnect reads it, rather than billing an estimate."""
    ex = exchange(model("drain", sims["a"], output_price=1))
    recorded: list[tuple[bool, int, str]] = []

    async def record(tracker: UsageTracker, *, status: str = "ok") -> int:
        recorded.append((tracker.exact, tracker.tokens(ex.model).output, status))
        return 0

    ex.record = record  # type: ignore[method-assign]
    await ex.admit(input_estimate=100, max_tokens=1000)
    try:
        opened = await ex.open_committed(stream_body, None, _ClosedWriter(), b"")  # type: ignore[arg-type]
        assert opened.parser.pending  # the rest of the read is not split yet
        tracker = UsageTracker()
        for event, data in opened.buffered:  # what the pump absorbed before its first write
            tracker.absorb(event.name, data)
        assert await ex.drain_after_disconnect(opened, tracker) == 499
    finally:
        await ex.settle()
    ((exact, output, status),) = recorded
    assert (exact, status) == (True, "client_disconnected")
    assert output > 0


def stream_body(route: Route) -> bytes:
    return orjson.dumps({**orjson.loads(body(route)), "stream": True})
