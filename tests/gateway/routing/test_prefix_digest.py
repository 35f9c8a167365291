"""The breakpoint-aware fallback (gateway/prefix_digest.py): what identifies a shared prefix,
which healthy deployment a displaced conversation is sent to, that only a displaced conversation
consults it, and the Redis side (written in the background, read only on a fallback), against the
session's private Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from accounts.keycache import KeyInfo
from catalog.snapshot import Route
from gateway import limits, prefix_digest, routing_policies
from gateway.context import RequestContext, sole
from gateway.errors import GatewayError
from gateway.exchange import AttemptFailed, Exchange
from gateway.prefix_digest import PrefixDigest, prefix_identity
from gateway.routing import health, rendezvous_order, route_order
from tests import services
from tests.gateway.routing.test_routing import FakeLimiter, ids, model_with, route, sessions

REDIS_URL = services.redis_url(services.REDIS_DB_ROUTING)
ROUTES = [route(1), route(2), route(3), route(4)]
MODEL = "anthropic/test-model"
SYSTEM = "You are the support agent of a bakery. " * 300


def body(system: Any = SYSTEM, tools: Any = None, question: str = "hi") -> dict[str, Any]:
    out: dict[str, Any] = {"messages": [{"role": "user", "content": question}]}
    if system is not None:
        out["system"] = system
    if tools is not None:
        out["tools"] = tools
    return out


def test_prefix_identity_is_the_tools_and_system_not_the_conversation() -> None:
    plain = prefix_identity(body())
    assert plain is not None
    assert prefix_identity(body(question="something else")) == plain
    blocks = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    assert prefix_identity(body(system=blocks)) == plain  # form and breakpoints do not matter
    assert prefix_identity(body(system=SYSTEM + "!")) != plain  # length
    assert prefix_identity(body(system="X" + SYSTEM[1:])) != plain  # head
    assert prefix_identity(body(system=SYSTEM[:-1] + "X")) != plain  # tail
    tools = [{"name": "order", "input_schema": {"type": "object"}}]
    assert prefix_identity(body(tools=tools)) != plain
    assert prefix_identity(body(system=None, tools=tools)) is not None
    assert prefix_identity(body(system=None)) is None
    assert prefix_identity(body(system="")) is None


@pytest.mark.parametrize("tools", [5, True, 1.5, "f", {"name": "f"}])
def test_prefix_identity_reads_tools_of_another_shape_as_no_tools(tools: object) -> None:
    """A routing hint never raises (issue 31 item 7: `"tools": 5` was a 500 here)."""
    assert prefix_identity(body(tools=tools)) == prefix_identity(body())


def _owned_by(owner: int) -> str:
    return next(k for k in sessions(500) if ids(rendezvous_order(ROUTES, k))[0] == owner)


@pytest.fixture
def local(settings: Any) -> Iterator[PrefixDigest]:
    settings.REDIS_URL = ""
    yield PrefixDigest()


def healthy_without(dead: int, session: str) -> list[Any]:
    return [r for r in rendezvous_order(ROUTES, session) if r.deployment.id != dead]


async def test_no_knowledge_keeps_the_rendezvous_order(local: PrefixDigest) -> None:
    session = _owned_by(1)
    healthy = healthy_without(1, session)
    assert ids(await local.prefer(healthy, MODEL, session, "p")) == ids(healthy)


async def test_the_latest_holder_of_the_shared_prefix_comes_first(local: PrefixDigest) -> None:
    session = _owned_by(1)
    healthy = healthy_without(1, session)
    last = ids(healthy)[-1]
    local.record(MODEL, "other conversation", "app prompt", ids(healthy)[0])
    local.record(MODEL, "a third one", "app prompt", last)
    order = await local.prefer(healthy, MODEL, session, "app prompt")
    assert ids(order) == [last, *ids(healthy)[:-1]]
    # Another model's prompt cache is another cache.
    assert ids(await local.prefer(healthy, "other/model", session, "app prompt")) == ids(healthy)


async def test_the_sessions_own_deployment_beats_the_shared_prefix(local: PrefixDigest) -> None:
    session = _owned_by(1)
    healthy = healthy_without(1, session)
    mine = ids(healthy)[1]
    local.record(MODEL, session, "app prompt", mine)  # its history is cached there now
    local.record(MODEL, "someone else", "app prompt", ids(healthy)[2])
    assert ids(await local.prefer(healthy, MODEL, session, "app prompt"))[0] == mine


async def test_a_holder_that_is_not_healthy_is_ignored(local: PrefixDigest) -> None:
    session = _owned_by(1)
    healthy = healthy_without(1, session)
    local.record(MODEL, session, "app prompt", 1)  # the cooling one itself
    assert ids(await local.prefer(healthy, MODEL, session, "app prompt")) == ids(healthy)


def test_the_maps_are_bounded(local: PrefixDigest, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefix_digest, "MAX_SESSIONS", 10)
    monkeypatch.setattr(prefix_digest, "MAX_PREFIXES", 3)
    for i in range(50):
        local.record(MODEL, f"s{i}", f"p{i}", 1)
    assert len(local._sessions) == 10
    assert len(local._prefixes) == 3
    assert (MODEL, "s49") in local._sessions and (MODEL, "s39") not in local._sessions


@pytest.fixture
def routed(settings: Any) -> Iterator[Any]:
    settings.REDIS_URL = ""
    settings.EZAT_COOLDOWN_FAILURES = 3
    settings.EZAT_ROUTING_POLICY = "rendezvous"
    settings.EZAT_ROUTING_PREFIX_AWARE = True
    routing_policies.reset()
    health.reset()
    prefix_digest.digest.reset()
    yield settings
    health.reset()
    prefix_digest.digest.reset()


async def test_only_a_displaced_conversation_consults_the_digest(
    routed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = prefix_digest.digest.prefer

    async def counting(*args: Any) -> Any:
        calls.append(args[2])
        return await real(*args)

    monkeypatch.setattr(prefix_digest.digest, "prefer", counting)
    session = _owned_by(1)
    elsewhere = _owned_by(2)
    healthy = healthy_without(1, session)
    prefix_digest.digest.record(MODEL, "x", "app prompt", ids(healthy)[-1])
    assert ids((await route_order(ROUTES, MODEL, session, "app prompt"))[0])[0] == 1
    assert calls == []  # the usual case: pure computation
    for _ in range(3):
        health.failure(1)
    order, consulted = await route_order(ROUTES, MODEL, session, "app prompt")
    assert ids(order) == [ids(healthy)[-1], *ids(healthy)[:-1], 1]
    assert consulted and calls == [session]
    order, consulted = await route_order(ROUTES, MODEL, elsewhere, "app prompt")
    assert ids(order)[0] == 2 and not consulted
    assert calls == [session]  # deployment 2's conversations are not displaced
    routed.EZAT_ROUTING_PREFIX_AWARE = False
    order, consulted = await route_order(ROUTES, MODEL, session, "app prompt")
    assert ids(order) == [*ids(healthy), 1] and not consulted
    assert calls == [session]


# --- Redis ------------------------------------------------------------------------------------


@pytest.fixture
def shared(settings: Any) -> Iterator[redis.Redis]:
    settings.REDIS_URL = REDIS_URL
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()  # a database of this session's private server (tests/services.py)
    yield client
    client.flushdb()
    client.close()


async def test_records_reach_redis_in_the_background_once_a_second(
    shared: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = PrefixDigest()
    one.record(MODEL, "s1", "app prompt", 2)  # schedules a flush; nothing is sent inline
    one.record(MODEL, "s2", "app prompt", 3)
    assert shared.keys("ezat:{route}:*") == []
    first = one._flush_task
    assert first is not None
    await first
    keys = {k.decode() for k in shared.keys("ezat:{route}:*")}
    assert len(keys) == 4  # two sessions, the prefix on 2 and on 3: one script call
    assert all(0 < shared.ttl(k) <= 3600 for k in keys)
    one.record(MODEL, "s3", "app prompt", 4)
    assert one._flush_task is first  # within the interval: only marked
    assert len(shared.keys("ezat:{route}:*")) == 4
    monkeypatch.setattr(one, "_flushed_at", 0.0)
    one.record(MODEL, "s4", "app prompt", 4)
    await one._flush_task
    assert len(shared.keys("ezat:{route}:*")) == 7  # s3, s4 and the prefix on 4


async def test_another_process_learns_where_a_prefix_lives_on_a_fallback(
    shared: redis.Redis,
) -> None:
    one, two = PrefixDigest(), PrefixDigest()
    session = _owned_by(1)
    healthy = healthy_without(1, session)
    holder = ids(healthy)[-1]
    one.record(MODEL, "someone", "app prompt", holder)
    await one._flush_task
    assert ids(await two.prefer(healthy, MODEL, session, "app prompt"))[0] == holder
    one.record(MODEL, session, "app prompt", ids(healthy)[1])
    one._flushed_at = 0.0
    one.record(MODEL, session, "app prompt", ids(healthy)[1])
    await one._flush_task
    assert ids(await two.prefer(healthy, MODEL, session, "app prompt"))[0] == ids(healthy)[1]


async def test_the_most_recent_record_of_a_session_wins_wherever_it_is(
    shared: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stale shared record (another deployment, earlier) must not pull a conversation back:
    that made displaced conversations flap between two deployments, rewriting their cache."""
    one, two = PrefixDigest(), PrefixDigest()
    session = _owned_by(1)
    healthy = healthy_without(1, session)
    first, second = ids(healthy)[0], ids(healthy)[1]
    clock = [1000.0]
    monkeypatch.setattr(prefix_digest.time, "time", lambda: clock[0])
    one.record(MODEL, session, "app prompt", first)  # flushed to Redis at t=1000
    await one._flush_task
    clock[0] = 1010.0
    one.record(MODEL, session, "app prompt", second)  # newer, local only (within the interval)
    assert ids(await one.prefer(healthy, MODEL, session, "app prompt"))[0] == second
    # Another process, with only the stale shared record, follows it; once it serves the
    # session itself, its own newer record wins over the shared one.
    assert ids(await two.prefer(healthy, MODEL, session, "app prompt"))[0] == first
    clock[0] = 1020.0
    two.record(MODEL, session, "app prompt", second)
    assert ids(await two.prefer(healthy, MODEL, session, "app prompt"))[0] == second


async def test_redis_down_leaves_the_local_view_deciding(settings: Any) -> None:
    settings.REDIS_URL = f"redis://127.0.0.1:{services.free_port()}/0"  # nothing listens
    digest = PrefixDigest()
    session = _owned_by(1)
    healthy = healthy_without(1, session)
    digest.record(MODEL, "someone", "app prompt", ids(healthy)[-1])
    await asyncio.wait_for(digest._flush_task, 5)  # fails, counted, never raised
    assert ids(await digest.prefer(healthy, MODEL, session, "app prompt"))[0] == ids(healthy)[-1]


async def _tried_after_failure(session: str, model: Any) -> list[int]:
    exchange = Exchange(
        RequestContext(
            api="messages",
            request_id=f"rid-{session}",
            key=KeyInfo(id=1, org_id=1, prefix="p", rpm_limit=100, spend_cap_nano=None),
            model_name="m",
            stream=False,
            session=session,
            prefix="app prompt",
            candidates=sole(model, "m"),
        )
    )
    await exchange.admit(input_estimate=10, max_tokens=10)
    tried: list[int] = []

    async def attempt(r: Route) -> str:
        tried.append(r.deployment.id)
        if len(tried) == 1:
            raise AttemptFailed(GatewayError(529, "busy"), "http_529", retryable=True)
        return "ok"

    await exchange.run(attempt)
    await exchange.settle()
    return tried


async def test_a_failed_first_attempt_fails_over_to_the_likeliest_holder(
    routed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not cooling yet (or its cooldown ran out while it is still down): the conversation's own
    deployment fails, and the next attempt goes where its prefix is, not to the next hash."""
    monkeypatch.setattr(limits, "get_limiter", FakeLimiter)
    model = model_with(ROUTES)
    session = _owned_by(1)
    healthy = healthy_without(1, session)
    holder = ids(healthy)[-1]
    prefix_digest.digest.record(model.id, "another conversation", "app prompt", holder)
    assert await _tried_after_failure(session, model) == [1, holder]
    # The success was recorded: the conversation now lives on `holder`.
    assert prefix_digest.digest._sessions[(model.id, session)][0] == holder
    routed.EZAT_ROUTING_PREFIX_AWARE = False
    assert await _tried_after_failure(session, model) == [1, ids(healthy)[0]]
