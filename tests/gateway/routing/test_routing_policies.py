"""The routing policies the cache benchmark compares (gateway/routing_policies.py): each ranks
every healthy deployment, cooling ones stay at the back, the setting picks the policy, and the
in-flight counts `least_busy` reads are kept by Exchange from the first attempt to the end."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accounts.keycache import KeyInfo
from catalog.snapshot import Route
from gateway import limits, routing_policies
from gateway.context import RequestContext, sole
from gateway.errors import GatewayError
from gateway.exchange import AttemptFailed, Exchange
from gateway.routing import HealthBoard, health, rendezvous_order
from gateway.routing_policies import InFlight, LeastBusy, Modulo, Random, RoundRobin, in_flight
from tests.gateway.routing.test_routing import FakeLimiter, ids, model_with, route, sessions

REPO = Path(__file__).resolve().parents[3]
ROUTES = [route(3), route(1), route(4), route(2)]  # catalog order is not id order


@pytest.fixture
def policy(settings: Any) -> Iterator[Any]:
    settings.REDIS_URL = ""
    settings.EZAT_COOLDOWN_FAILURES = 3
    routing_policies.reset()
    health.reset()
    yield settings
    routing_policies.reset()
    health.reset()


def test_every_policy_ranks_every_healthy_route_once(policy: Any) -> None:
    for name in policy.EZAT_ROUTING_POLICIES:
        policy.EZAT_ROUTING_POLICY = name
        chosen = routing_policies.current()
        assert chosen.name == name
        for session in sessions(20):
            assert sorted(ids(chosen.rank(ROUTES, session))) == [1, 2, 3, 4], name
        assert chosen.rank([], "s") == []


def test_modulo_is_sticky_but_a_lost_deployment_remaps_most_sessions() -> None:
    keys = sessions(4000)
    modulo = Modulo()
    before = {k: ids(modulo.rank(ROUTES, k))[0] for k in keys}
    assert before == {k: ids(modulo.rank(ROUTES, k))[0] for k in keys}  # sticky
    assert all(700 < n < 1300 for n in Counter(before.values()).values())
    without_4 = [r for r in ROUTES if r.deployment.id != 4]
    after = {k: ids(modulo.rank(without_4, k))[0] for k in keys}
    moved = sum(before[k] != after[k] for k in keys)
    # Only deployment 4's quarter had to move; modulo moves about three quarters of everyone.
    assert moved > 0.6 * len(keys)
    rendezvous = {k: ids(rendezvous_order(ROUTES, k))[0] for k in keys}
    moved_rendezvous = sum(rendezvous[k] != ids(rendezvous_order(without_4, k))[0] for k in keys)
    assert moved_rendezvous == sum(1 for k in keys if rendezvous[k] == 4)


def test_round_robin_takes_deployments_in_turn_whatever_the_session() -> None:
    rr = RoundRobin()
    firsts = [ids(rr.rank(ROUTES, "same session"))[0] for _ in range(8)]
    assert firsts == [1, 2, 3, 4, 1, 2, 3, 4]
    assert ids(rr.rank(ROUTES, "x")) == [1, 2, 3, 4]  # failover continues the rotation
    assert ids(rr.rank(ROUTES, "x")) == [2, 3, 4, 1]


def test_random_is_reproducible_with_a_seed_and_spreads() -> None:
    one, two = Random(7), Random(7)
    picks = [ids(one.rank(ROUTES, "s"))[0] for _ in range(2000)]
    assert picks == [ids(two.rank(ROUTES, "s"))[0] for _ in range(2000)]
    assert all(400 < n < 600 for n in Counter(picks).values())
    assert picks != [ids(Random(8).rank(ROUTES, "s"))[0] for _ in range(2000)]


def test_least_busy_prefers_fewest_in_flight_and_takes_ties_in_turn() -> None:
    counts = InFlight()
    busy = LeastBusy(counts)
    assert [ids(busy.rank(ROUTES, "s"))[0] for _ in range(4)] == [1, 2, 3, 4]
    counts.begin(1)
    counts.begin(1)
    counts.begin(2)
    counts.begin(3)
    assert ids(busy.rank(ROUTES, "s")) == [4, 2, 3, 1]  # 0 in flight, then the ones, then 1
    counts.end(1)
    counts.end(1)
    counts.end(1)  # one end too many never goes negative
    assert counts.count(1) == 0
    assert ids(busy.rank(ROUTES, "s"))[:2] == [4, 1]


def test_cooling_deployments_stay_last_under_every_policy(policy: Any) -> None:
    for _ in range(3):
        health.failure(2)
    for name in policy.EZAT_ROUTING_POLICIES:
        policy.EZAT_ROUTING_POLICY = name
        routing_policies.reset()
        for session in sessions(30):
            placed = health.placement(ROUTES, session)
            assert ids(placed.order)[-1] == 2, name
            assert sorted(ids(placed.healthy)) == [1, 3, 4]


def test_only_rendezvous_reports_a_displaced_conversation(policy: Any) -> None:
    board = HealthBoard()
    for _ in range(3):
        board.failure(2)
    owned_by_2 = [k for k in sessions(200) if ids(rendezvous_order(ROUTES, k))[0] == 2]
    owned_by_1 = [k for k in sessions(200) if ids(rendezvous_order(ROUTES, k))[0] == 1]
    assert all(board.placement(ROUTES, k).displaced for k in owned_by_2)
    assert not any(board.placement(ROUTES, k).displaced for k in owned_by_1)
    policy.EZAT_ROUTING_POLICY = "modulo"
    assert not any(board.placement(ROUTES, k).displaced for k in owned_by_2)


def test_an_unknown_policy_refuses_to_start() -> None:
    env = {
        **os.environ,
        "EZAT_ROUTING_POLICY": "fastest",
        "DJANGO_SETTINGS_MODULE": "ezat.settings",
    }
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "EZAT_ROUTING_POLICY must be one of rendezvous, modulo" in done.stderr
    assert "not 'fastest'" in done.stderr


async def _exchange(session: str) -> Exchange:
    exchange = Exchange(
        RequestContext(
            api="messages",
            request_id=f"rid-{session}",
            key=KeyInfo(id=1, org_id=1, prefix="p", rpm_limit=100, spend_cap_nano=None),
            model_name="kinds",
            stream=False,
            session=session,
            candidates=sole(model_with([route(1), route(2)]), "kinds"),
        )
    )
    await exchange.admit(input_estimate=10, max_tokens=10)
    return exchange


async def test_a_request_is_in_flight_from_its_attempt_to_its_end(
    policy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "get_limiter", FakeLimiter)
    exchange = await _exchange("in-flight")
    first, second = ids(exchange._plan[0][1])
    seen: list[tuple[int, int, int]] = []

    async def attempt(r: Route) -> str:
        seen.append((r.deployment.id, in_flight.count(first), in_flight.count(second)))
        if r.deployment.id == first:
            raise AttemptFailed(GatewayError(529, "busy"), "http_529", retryable=True)
        return "ok"

    assert await exchange.run(attempt) == "ok"
    # The failed attempt counted while it ran and stopped counting when it failed.
    assert seen == [(first, 1, 0), (second, 0, 1)]
    assert (in_flight.count(first), in_flight.count(second)) == (0, 1)  # the answer streams on
    await exchange.settle()
    assert (in_flight.count(first), in_flight.count(second)) == (0, 0)
    await exchange.settle()  # once
    assert in_flight.count(second) == 0
