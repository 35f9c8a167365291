"""gateway.routing without a server: session keys, weighted rendezvous hashing, the health board,
and provider-kind pinning in Exchange (signed thinking history).

Stickiness is what keeps a conversation's prompt cache warm, so the properties here are the ones
operators rely on: a key maps to one deployment, adding or removing a deployment only moves the
sessions it gains or loses, shares follow weights, and a cooling deployment is demoted, never lost.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from accounts.keycache import KeyInfo
from catalog.pricing import Prices, PriceSchedule
from catalog.snapshot import DeploymentInfo, ModelInfo, Route
from gateway import limits
from gateway.context import RequestContext, sole
from gateway.errors import GatewayError
from gateway.exchange import AttemptFailed, Exchange
from gateway.routing import (
    SESSION_MAX,
    HealthBoard,
    cooldown_key,
    cooldown_state,
    has_thinking_signatures,
    health,
    rendezvous_order,
    session_key,
)


def route(dep_id: int, weight: int = 1, kind: str = "anthropic") -> Route:
    return Route(
        DeploymentInfo(
            id=dep_id,
            name=f"d{dep_id}",
            kind=kind,
            base_url=f"http://d{dep_id}.invalid",
            api_key="k",
            weight=weight,
            max_concurrency=10,
        ),
        "claude-x",
    )


def top(routes: list[Route], session: str) -> int:
    return rendezvous_order(routes, session)[0].deployment.id


def ids(routes: list[Route]) -> list[int]:
    return [r.deployment.id for r in routes]


def sessions(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [f"c:{rng.getrandbits(64):016x}" for _ in range(n)]


# --- session keys -----------------------------------------------------------------------------


BODY = {
    "system": "You are terse.",
    "messages": [{"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"}],
}


def test_session_key_precedence() -> None:
    assert session_key("conv-1", "pck-1", BODY) == "h:conv-1"
    assert session_key(None, "pck-1", BODY) == "p:pck-1"
    assert session_key("", "pck-1", BODY) == "p:pck-1"  # an empty header is no header
    derived = session_key(None, None, BODY)
    assert derived.startswith("c:")
    assert session_key(None, "", BODY) == derived
    # The three sources live in separate namespaces: a header equal to a cache key is not it.
    assert session_key("x", None, BODY) != session_key(None, "x", BODY)


def test_session_key_truncated_to_256_chars() -> None:
    long_a = "a" * SESSION_MAX + "tail-1"
    long_b = "a" * SESSION_MAX + "tail-2"
    assert session_key(long_a, None, {}) == "h:" + "a" * SESSION_MAX
    assert session_key(long_a, None, {}) == session_key(long_b, None, {})
    assert (
        session_key(None, long_a, {}) == session_key(None, long_b, {}) == "p:" + "a" * SESSION_MAX
    )
    assert session_key("a" * (SESSION_MAX - 1) + "b", None, {}) != session_key(long_a, None, {})


def test_derived_key_is_system_and_first_message_only() -> None:
    base = session_key(None, None, BODY)
    later = {**BODY, "messages": [*BODY["messages"], {"role": "user", "content": "next turn"}]}
    assert session_key(None, None, later) == base
    assert session_key(None, None, {**BODY, "system": "Other."}) != base
    other_first = {**BODY, "messages": [{"role": "user", "content": "different"}]}
    assert session_key(None, None, other_first) != base
    assert session_key(None, None, {}) == session_key(None, None, {"messages": []})


def test_derived_key_of_long_prompts_uses_length_head_and_tail() -> None:
    """Long first messages are identified by length + first 16 KiB + last 1 KiB (cheap)."""
    long_text = "a" * 100_000
    base = session_key(None, None, {"messages": [{"role": "user", "content": long_text}]})
    middle_changed = long_text[:50_000] + "b" + long_text[50_001:]
    assert (
        session_key(None, None, {"messages": [{"role": "user", "content": middle_changed}]}) == base
    )
    for other in (long_text + "a", "b" + long_text[1:], long_text[:-1] + "b"):
        assert session_key(None, None, {"messages": [{"role": "user", "content": other}]}) != base


def test_derived_key_ignores_moving_cache_breakpoints() -> None:
    # Clients (and the OpenAI API's automatic caching) put a breakpoint on the newest message:
    # on turn 1 that is the first message, on turn 2 it is not. The session must not change.
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    turn1 = {
        "system": system,
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            }
        ],
    }
    turn2 = {
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": "hello"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "more", "cache_control": {"type": "ephemeral"}}
                ],
            },
        ],
    }
    assert session_key(None, None, turn1) == session_key(None, None, turn2)
    # A client that puts the breakpoint on the newest message converts it to block form on
    # turn 1 and leaves it as plain text later: the same content either way.
    turn3 = {
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "hi"}, *turn2["messages"][1:]],
    }
    assert session_key(None, None, turn1) == session_key(None, None, turn3)
    # Content still counts.
    turn2["messages"][0]["content"][0]["text"] = "hi!"
    assert session_key(None, None, turn1) != session_key(None, None, turn2)


# --- rendezvous hashing -------------------------------------------------------------------------


def test_rendezvous_is_deterministic_and_ignores_route_order() -> None:
    routes = [route(1), route(2, 3), route(3), route(4, 2)]
    for session in sessions(200):
        first = ids(rendezvous_order(routes, session))
        assert ids(rendezvous_order(list(reversed(routes)), session)) == first
        assert ids(rendezvous_order(routes, session)) == first
        assert sorted(first) == [1, 2, 3, 4]


def test_rendezvous_spreads_sessions() -> None:
    routes = [route(1), route(2), route(3)]
    tops = {top(routes, s) for s in sessions(50)}
    assert tops == {1, 2, 3}


DEPLOYMENTS = st.dictionaries(
    keys=st.integers(1, 10_000), values=st.integers(1, 20), min_size=1, max_size=8
)


@hsettings(max_examples=200, deadline=None)
@given(
    deployments=DEPLOYMENTS,
    new_id=st.integers(10_001, 20_000),
    new_weight=st.integers(1, 20),
    keys=st.lists(st.text(max_size=40), min_size=1, max_size=30),
)
def test_adding_a_deployment_moves_only_its_share(
    deployments: dict[int, int], new_id: int, new_weight: int, keys: list[str]
) -> None:
    before = [route(d, w) for d, w in deployments.items()]
    after = [*before, route(new_id, new_weight)]
    for key in keys:
        old_order = ids(rendezvous_order(before, key))
        new_order = ids(rendezvous_order(after, key))
        # A session either keeps its deployment or moves to the new one, never elsewhere;
        # and the failover order among the old deployments is unchanged too.
        assert new_order[0] in (old_order[0], new_id)
        assert [d for d in new_order if d != new_id] == old_order


@hsettings(max_examples=200, deadline=None)
@given(
    deployments=st.dictionaries(
        keys=st.integers(1, 10_000), values=st.integers(1, 20), min_size=2, max_size=8
    ),
    data=st.data(),
    keys=st.lists(st.text(max_size=40), min_size=1, max_size=30),
)
def test_removing_a_deployment_moves_only_its_sessions(
    deployments: dict[int, int], data: st.DataObject, keys: list[str]
) -> None:
    gone = data.draw(st.sampled_from(sorted(deployments)))
    before = [route(d, w) for d, w in deployments.items()]
    after = [r for r in before if r.deployment.id != gone]
    for key in keys:
        old_order = ids(rendezvous_order(before, key))
        new_order = ids(rendezvous_order(after, key))
        if old_order[0] != gone:
            assert new_order[0] == old_order[0]
        assert new_order == [d for d in old_order if d != gone]


def test_share_moved_by_adding_matches_its_weight() -> None:
    before = [route(1, 1), route(2, 2), route(3, 1)]
    after = [*before, route(4, 4)]  # 4 / (4 + 4) = half of all sessions should move to it
    keys = sessions(20_000)
    moved = [k for k in keys if top(before, k) != top(after, k)]
    assert all(top(after, k) == 4 for k in moved)
    assert abs(len(moved) / len(keys) - 0.5) < 0.02


@pytest.mark.parametrize("weights", [(1, 3), (1, 2, 3, 4), (5, 1, 1)])
def test_shares_follow_weights(weights: tuple[int, ...]) -> None:
    routes = [route(i + 1, w) for i, w in enumerate(weights)]
    keys = sessions(20_000, seed=len(weights))
    counts = Counter(top(routes, k) for k in keys)
    total = sum(weights)
    for i, w in enumerate(weights):
        # ±0.015 is over 4 standard deviations for 20k sessions at any of these shares.
        assert abs(counts[i + 1] / len(keys) - w / total) < 0.015, counts


# --- health board -------------------------------------------------------------------------------


@pytest.fixture
def board(settings: Any) -> HealthBoard:
    settings.REDIS_URL = ""
    settings.EZAT_COOLDOWN_FAILURES = 3
    settings.EZAT_COOLDOWN_SECONDS = 30.0
    return HealthBoard()


def test_cooling_after_consecutive_failures_goes_last_never_dropped(board: HealthBoard) -> None:
    routes = [route(1), route(2), route(3)]
    key = next(k for k in sessions(500) if ids(rendezvous_order(routes, k)) == [1, 2, 3])
    board.failure(1)
    board.failure(1)
    assert ids(board.order(routes, key)) == [1, 2, 3]  # two failures are not a pattern yet
    board.failure(1)
    assert board.is_cooling(1)
    assert ids(board.order(routes, key)) == [2, 3, 1]
    for _ in range(3):
        board.failure(2)
    assert ids(board.order(routes, key)) == [3, 1, 2]  # cooling ones keep their own order
    for _ in range(3):
        board.failure(3)
    # Everyone cooling: a preference, never a wall; the model is still served in hash order.
    assert ids(board.order(routes, key)) == [1, 2, 3]


def test_success_resets_the_failure_count(board: HealthBoard) -> None:
    for _ in range(2):
        board.failure(7)
    board.success(7)
    for _ in range(2):
        board.failure(7)
    assert not board.is_cooling(7)
    board.failure(7)
    assert board.is_cooling(7)


def test_a_success_ends_a_cooldown(board: HealthBoard) -> None:
    """When every deployment cools, one is still tried; if it answers, it is healthy again."""
    for _ in range(3):
        board.failure(7)
    assert board.is_cooling(7)
    board.success(7)
    assert not board.is_cooling(7)


def test_an_answer_to_an_attempt_older_than_the_cooldown_does_not_end_it(
    board: HealthBoard, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long request sent before the deployment started failing finishes after its cooldown
    began: that is no news about the deployment now (it would re-open a failing deployment)."""
    import gateway.routing as routing

    now = [1_000_000.0]
    monkeypatch.setattr(routing.time, "time", lambda: now[0])
    sent_before = now[0] - 5
    for _ in range(3):
        board.failure(7)
    assert board.is_cooling(7)
    now[0] += 2
    board.success(7, since=sent_before)
    assert board.is_cooling(7)
    board.success(7, since=now[0] - 1)  # sent after the cooldown began: it answers now
    assert not board.is_cooling(7)


def test_an_answer_sent_before_a_failure_does_not_reset_the_count(
    board: HealthBoard, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests already running when a deployment starts failing finish fine: that must not
    reset its failure count, or a failing deployment with long requests never cools down."""
    import gateway.routing as routing

    now = [1_000_000.0]
    monkeypatch.setattr(routing.time, "time", lambda: now[0])
    sent_before = now[0] - 5
    board.failure(7)
    now[0] += 1
    board.failure(7)
    board.success(7, since=sent_before)  # old news
    board.failure(7)
    assert board.is_cooling(7)  # three failures in a row, whatever finished in between
    board.reset()
    board.failure(7)
    board.failure(7)
    board.success(7, since=now[0] + 0.5)  # sent after the last failure, and it answered
    board.failure(7)
    assert not board.is_cooling(7)


def test_cooldown_ends_after_its_time(board: HealthBoard, monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.routing as routing

    now = [1_000_000.0]
    monkeypatch.setattr(routing.time, "time", lambda: now[0])
    routes = [route(1), route(2)]
    key = next(k for k in sessions(500) if ids(rendezvous_order(routes, k)) == [1, 2])
    for _ in range(3):
        board.failure(1)
    assert ids(board.order(routes, key)) == [2, 1]
    assert board.state([1, 2]) == {1: now[0] + 30.0, 2: None}
    now[0] += 29.9
    assert ids(board.order(routes, key)) == [2, 1]
    now[0] += 0.2
    assert ids(board.order(routes, key)) == [1, 2]
    assert board.state([1, 2]) == {1: None, 2: None}


def test_a_quota_cooldown_is_long_at_once_and_ends_on_an_answer(
    board: HealthBoard, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cool_down(seconds): a provider account out of quota (gateway/exchange.py) rests at once
    for its own length, not after three failures for EZAT_COOLDOWN_SECONDS; an attempt sent
    after it began that answers (the operator paid) ends it, an older one does not."""
    import gateway.routing as routing

    now = [1_000_000.0]
    monkeypatch.setattr(routing.time, "time", lambda: now[0])
    routes = [route(1), route(2)]
    key = next(k for k in sessions(500) if ids(rendezvous_order(routes, k)) == [1, 2])
    sent_before = now[0] - 1
    board.cool_down(1, 600.0)
    assert board.state([1, 2]) == {1: now[0] + 600.0, 2: None}
    now[0] += 599.0
    assert ids(board.order(routes, key)) == [2, 1]
    board.success(1, since=sent_before)  # old news
    assert board.is_cooling(1)
    board.success(1, since=now[0] - 1)  # sent long after the cooldown began, and answered
    assert not board.is_cooling(1)
    board.cool_down(1, 600.0)
    now[0] += 600.1
    assert ids(board.order(routes, key)) == [1, 2]


def test_cooldown_state_without_redis_is_the_local_board(settings: Any) -> None:
    settings.REDIS_URL = ""
    settings.EZAT_COOLDOWN_FAILURES = 3
    health.reset()
    try:
        for _ in range(3):
            health.failure(424242)
        state = cooldown_state([424242, 424243])
        assert state[424242] is not None and state[424243] is None
    finally:
        health.reset()


class FakeRedis:
    """Stands in for redis.asyncio: one shared dict, like two processes on one Redis."""

    def __init__(self, store: dict[str, str]) -> None:
        self.store = store
        self.expiries: dict[str, int] = {}
        self.published: list[tuple[str, str]] = []

    async def set(self, key: str, value: str, ex: int) -> None:
        self.store[key] = value
        self.expiries[key] = ex

    async def mget(self, keys: list[str]) -> list[bytes | None]:
        return [self.store[k].encode() if k in self.store else None for k in keys]

    async def publish(self, channel: str, message: str) -> None:
        self.published.append((channel, message))


async def test_cooldown_is_shared_through_redis(settings: Any) -> None:
    settings.REDIS_URL = "redis://fake.invalid/0"
    settings.EZAT_COOLDOWN_FAILURES = 3
    settings.EZAT_COOLDOWN_SECONDS = 30.0
    shared: dict[str, str] = {}
    one, two = HealthBoard(), HealthBoard()
    one._redis, two._redis = FakeRedis(shared), FakeRedis(shared)
    routes = [route(1), route(2)]
    key = next(k for k in sessions(500) if ids(rendezvous_order(routes, k)) == [1, 2])
    for _ in range(3):
        one.failure(1)
    await asyncio.sleep(0)  # the publish task
    assert cooldown_key(1) in shared
    assert 30 <= one._redis.expiries[cooldown_key(1)] <= 31
    # The other process learns it on its next sync (started by a routing decision).
    two.order(routes, key)
    await asyncio.sleep(0)
    assert ids(two.order(routes, key)) == [2, 1]
    assert two.is_cooling(1)


# --- provider kind pinning (signed thinking history) ----------------------------------------


class FakeLimiter:
    async def admit(self, req: limits.AdmitRequest) -> limits.Admitted:
        chosen = req.candidates[0][0] if req.candidates else None
        return limits.Admitted(rate=limits.RateInfo(100, 99, 0.0), deployment_id=chosen)

    async def acquire_slot(
        self, request_id: str, deployment_id: int, max_concurrency: int, **share: Any
    ) -> bool:
        return True

    async def release_slot(self, request_id: str, deployment_id: int) -> None:
        return None

    async def settle(self, request_id: str, **kwargs: int) -> None:
        return None


@pytest.fixture
def clean_health(settings: Any) -> Iterator[None]:
    settings.REDIS_URL = ""
    health.reset()
    yield
    health.reset()


def model_with(routes: list[Route]) -> ModelInfo:
    return ModelInfo(
        id="test/kinds",
        name="kinds",
        aliases=(),
        sampling=False,
        prompt_caching=True,
        vision=True,
        pdf=True,
        tools=True,
        structured_outputs=True,
        reasoning_efforts=(),
        max_output_tokens=1000,
        context_window=10_000,
        pricing=PriceSchedule.flat(Prices(1, 1, 1, 1, 1)),
        routes=tuple(routes),
        created_at="2026-01-01T00:00:00Z",
    )


async def tried_kinds(routes: list[Route], session: str, *, pin_kind: bool) -> list[int]:
    exchange = Exchange(
        RequestContext(
            api="messages",
            request_id=f"rid-{session}-{pin_kind}",
            key=KeyInfo(id=1, org_id=1, prefix="p", rpm_limit=100, spend_cap_nano=None),
            model_name="kinds",
            stream=False,
            session=session,
            candidates=sole(model_with(routes), "kinds"),
            signatures=[] if pin_kind else None,
        )
    )
    await exchange.admit(input_estimate=10, max_tokens=10)
    tried: list[int] = []

    async def attempt(r: Route) -> None:
        tried.append(r.deployment.id)
        raise AttemptFailed(
            GatewayError(529, "busy", type_="overloaded_error"), "http_529", retryable=True
        )

    with pytest.raises(GatewayError):
        await exchange.run(attempt)
    return tried


async def test_signed_thinking_failover_keeps_the_provider_kind(
    clean_health: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "get_limiter", FakeLimiter)
    routes = [
        route(1, kind="anthropic"),
        route(2, kind="bedrock"),
        route(3, kind="anthropic"),
        route(4, kind="vertex"),
    ]
    kinds = {r.deployment.id: r.deployment.kind for r in routes}
    for session in sessions(12):
        pinned = await tried_kinds(routes, session, pin_kind=True)
        first_kind = kinds[ids(rendezvous_order(routes, session))[0]]
        assert pinned == [
            d for d in ids(rendezvous_order(routes, session)) if kinds[d] == first_kind
        ]
        health.reset()
        free = await tried_kinds(routes, session, pin_kind=False)
        assert sorted(free) == [1, 2, 3, 4]
        health.reset()


def test_thinking_signature_detection() -> None:
    signed = b'{"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"x",'
    assert has_thinking_signatures(signed + b'"signature":"EqQB"}]}]}')
    assert not has_thinking_signatures(b'{"messages":[{"role":"user","content":"hi"}]}')


def test_long_first_message_keeps_its_key_across_forms_and_breakpoints() -> None:
    """Turn 1 sends a long prompt as a block with a breakpoint, turn 2 as a plain string: the
    shortened identity of a long string must not depend on either."""
    long_text = "x" * 30_000 + "tail"
    block = {"type": "text", "text": long_text, "cache_control": {"type": "ephemeral"}}
    turn1 = {"messages": [{"role": "user", "content": [block]}]}
    turn2 = {
        "messages": [
            {"role": "user", "content": long_text},
            {"role": "assistant", "content": "ok"},
        ]
    }
    assert session_key(None, None, turn1) == session_key(None, None, turn2)
