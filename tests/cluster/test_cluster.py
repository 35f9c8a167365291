"""Three gateway nodes behind HAProxy on one PostgreSQL, one Redis and Celery (issue 18): the
limits, holds, cooldowns and thinking store are shared across nodes, a node killed mid-traffic
loses no answered request, and a rolling restart under load loses nothing at all.

The tests run in this order on one cluster (tests/cluster/conftest.py); each uses its own org
and key. Every wait is on a condition with a generous deadline (tests/waiting.py)."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
import redis

from gateway.routing import cooldown_key
from tests.cluster.conftest import HOLD_TTL_SECONDS, NODES, ClusterContext, sigkill
from tests.cluster.metrics import node_metric
from tests.cluster.shared_limits import assert_cap_holds, assert_rpm_shared, fail_until_cooling
from tests.cluster.traffic import Answer, Load, call, drive, second_turns_sent, thinking_tool_loop
from tests.support.stack import Key
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def test_traffic_is_spread_and_billed_once(cluster: ClusterContext) -> None:
    key = cluster.new_key()
    answers = drive(cluster.url, key.secret, 60)
    assert all(a.ok for a in answers), [a for a in answers if not a.ok][:3]
    assert set(Counter(a.node for a in answers)) == set(NODES)
    cluster.assert_billed_once(answers)
    # Nothing else was recorded for this key: one record per answer, no extra attempt billed.
    assert len(cluster.usage(org_id=key.org_id)) == len(answers)


def test_prometheus_scrapes_every_node(cluster: ClusterContext) -> None:
    """A real Prometheus scrapes the three nodes; PromQL over its API returns the request
    count of all of them (the nodes are idle here, so their counters hold still)."""
    prometheus = cluster.cluster.prometheus
    assert prometheus is not None
    nodes = cluster.cluster.nodes
    per_node = {name: node_metric(g.url, "ezat_requests_total") for name, g in nodes.items()}
    assert all(count > 0 for count in per_node.values()), per_node
    expected = sum(per_node.values())

    def scraped() -> float | None:
        up = prometheus.query('count(up{job="ezat"} == 1)')
        total = prometheus.query('sum(ezat_requests_total{job="ezat"})')
        if up and float(up[0]["value"][1]) == len(nodes) and total:
            value = float(total[0]["value"][1])
            return value if value == expected else None
        return None

    assert wait_for(scraped, 60, what=f"Prometheus to report {expected} requests") == expected


def test_rpm_is_enforced_globally(cluster: ClusterContext) -> None:
    key = cluster.new_key(rpm=30)
    assert_rpm_shared(cluster.url, key.secret, 30, 75, NODES)


def test_spend_cap_holds_across_nodes(cluster: ClusterContext) -> None:
    one_hold, one_cost = cost = cluster.hold_and_cost()
    # Room for a dozen answers and for four holds at once (admission counts the holds of the
    # requests in flight, whose worst case is above what they end up costing).
    cap_nano = max(one_cost * 12, one_hold * 4)
    key = cluster.new_key(cap_nano=cap_nano)
    ok = assert_cap_holds(cluster, cluster.url, key, cap_nano, cost, NODES)
    assert len({a.node for a in ok}) >= 2  # answers from at least two nodes


def test_cooldown_set_on_one_node_is_honoured_by_the_others(cluster: ClusterContext) -> None:
    from catalog.models import Deployment

    key = cluster.new_key()
    with cluster.blocker.unblock():
        failing = Deployment.objects.get(name="cl-b")
    client = redis.Redis.from_url(cluster.cluster.redis_url)
    shared_key = cooldown_key(failing.id)
    sim = cluster.sims["cl-b"]
    sim.script({"status": 529, "times": -1})
    try:
        n1 = cluster.cluster.nodes["n1"].url
        # Only n1 sees the failures (its conversations fail over to cl-a and are answered).
        fail_until_cooling(n1, key.secret, lambda: bool(client.exists(shared_key)), "n1")
        # The other nodes read cooldowns from Redis at most once a second, in the background of
        # a request (gateway/routing.py). Warm them up (answered by failover, never a success on
        # cl-b, which would end the cooldown everywhere) until each node's own gauge shows the
        # cooldown: a condition, not a sleep of one sync period that a busy machine outlasts.
        for name in ("n2", "n3"):
            url = cluster.cluster.nodes[name].url

            def synced(url: str = url) -> bool:
                answer = call(url, key.secret, "messages", "warm up")
                assert answer.ok, answer
                return node_metric(url, "ezat_deployments_cooling") >= 1

            wait_for(synced, what=f"{name} to read cl-b's cooldown from Redis", interval=0.5)
        seen_by_b = len(sim.requests())
        for name in ("n2", "n3"):
            url = cluster.cluster.nodes[name].url
            for i in range(20):
                answer = call(url, key.secret, ("messages", "chat")[i % 2], f"{name} after {i}")
                assert answer.ok, answer
        assert len(sim.requests()) == seen_by_b, "a node sent a request to a cooling deployment"
        assert 0 < client.ttl(shared_key) <= 31
    finally:
        sim.clear_script()
        client.delete(shared_key)


def test_thinking_tool_loop_across_nodes(cluster: ClusterContext) -> None:
    key = cluster.new_key()
    # Round-robin with nothing else running: the second turn lands on another node, which finds
    # the signed thinking block in Redis and sends it back upstream.
    loop = thinking_tool_loop(cluster.url, key.secret, "Bergen", "7°C and rain")
    assert loop.first_node != loop.second_node
    assert loop.answer == "Tool said: 7°C and rain"
    (sent,) = second_turns_sent(cluster.sims.values(), "Bergen")
    assistant = sent["messages"][1]
    assert [b["type"] for b in assistant["content"]] == ["thinking", "tool_use"]
    assert assistant["content"][0]["signature"]


def _held(client: redis.Redis, key: Key) -> int:
    return int(client.hget(f"{{ezat}}:org:{key.org_id}", "held") or 0)


def _live_leases(cluster: ClusterContext, client: redis.Redis, key: Key) -> int:
    """Unexpired concurrency leases of the key and slots on the deployments (only this test's
    traffic runs meanwhile)."""
    from catalog.models import Deployment

    with cluster.blocker.unblock():
        deployments = list(Deployment.objects.values_list("id", flat=True))
    now_ms = int(time.time() * 1000)
    sets = [f"{{ezat}}:conc:k:{key.key_id}", *(f"{{ezat}}:slots:{d}" for d in deployments)]
    return sum(int(client.zcount(name, now_ms, "+inf")) for name in sets)


def test_node_killed_mid_traffic(cluster: ClusterContext) -> None:
    key = cluster.new_key(concurrency=100)
    client = redis.Redis.from_url(cluster.cluster.redis_url)
    victim = cluster.cluster.nodes["n2"]
    # Streams open on the victim at the moment it dies: paused upstream until released.
    for sim in cluster.sims.values():
        sim.script({"match": "held open", "pause_after_events": 3, "pause": 120, "times": -1})
    held: list[Answer] = []
    openers = [
        threading.Thread(
            target=lambda n=n: held.append(
                call(victim.url, key.secret, "chat-stream", f"held open {n}", max_retries=0)
            ),
            daemon=True,
        )
        for n in range(3)
    ]
    try:
        for opener in openers:
            opener.start()
        wait_for(
            lambda: (
                sum(
                    "held open" in str(r.get("body"))
                    for s in cluster.sims.values()
                    for r in s.requests()
                )
                >= 3
            ),
            what="three streams open on the victim",
        )
        with Load(cluster.url, key.secret, text="kill") as load:
            wait_for(lambda: load.count() >= 10, what="traffic")
            # The victim's streams hold money and leases (a lease is beaten for at most the
            # hold TTL, 15 s here, so this runs well within it).
            assert _held(client, key) > 0, (
                client.hgetall(f"{{ezat}}:org:{key.org_id}"),
                client.hgetall(f"{{ezat}}:org:{key.org_id}:hold"),
            )
            assert _live_leases(cluster, client, key) > 0
            sigkill(victim.process)
            cluster.lb.wait_states({"n2": "DOWN"})
            after_down = load.count()
            wait_for(lambda: load.count() >= after_down + 20, 120, what="traffic after the kill")
        answers = load.answers
    finally:
        for sim in cluster.sims.values():
            sim.clear_script()
            sim.release()
    for opener in openers:
        opener.join(30)
    assert len(held) == 3 and not any(a.ok for a in held), held  # cut by the kill
    # HAProxy routes around the dead node; everything it sent elsewhere was answered.
    assert all(a.node != "n2" for a in answers[after_down:] if a.ok)
    assert all(a.ok for a in answers[after_down + 6 :]), [a for a in answers if not a.ok][:3]
    lost = [a for a in answers if not a.ok]
    assert len(lost) <= 6, lost  # at most the callers whose stream the kill cut
    cluster.assert_billed_once(answers)
    # When a survivor bills the dead node's checkpointed streams, its round does not fail
    # (whether the victim had written a checkpoint before the kill depends on timing).
    survivors = [g for name, g in cluster.cluster.nodes.items() if name != "n2"]
    # The dead node's holds and leases expire; they stop counting by themselves. Holds are
    # pruned by the org's next admission, so each check is one more (synchronous) request.
    killed_at = time.monotonic()

    def expired() -> bool:
        assert call(cluster.url, key.secret, "chat", "after ttl").ok
        cluster.wait_flushed()  # the probe's own hold settled (EZAT_USAGE_COMMIT=group)
        return _held(client, key) == 0 and _live_leases(cluster, client, key) == 0

    wait_for(expired, 60, what="the killed node's holds and leases to expire")
    assert time.monotonic() - killed_at < HOLD_TTL_SECONDS + 30
    assert not any(
        "durability round failed" in g.log_path.read_text(errors="replace") for g in survivors
    )
    cluster.cluster.revive("n2")
    cluster.lb.wait_states({"n2": "UP"})


def test_rolling_restart_under_load_loses_nothing(cluster: ClusterContext) -> None:
    key = cluster.new_key()
    started = time.monotonic()
    with Load(cluster.url, key.secret, text="rolling") as load:
        for name in NODES:
            before = load.count()
            wait_for(lambda b=before: load.count() >= b + 6, 120, what="traffic")
            cluster.cluster.restart(name)  # SIGTERM, drained, exited, started again
            cluster.lb.wait_states({name: "UP"})
        before = load.count()
        wait_for(lambda: load.count() >= before + 10, 120, what="traffic after the restarts")
    answers = load.answers
    assert all(a.ok for a in answers), [a for a in answers if not a.ok][:5]
    assert len(answers) >= 28
    cluster.assert_billed_once(answers)
    assert len(cluster.usage(org_id=key.org_id)) == len(answers)
    print(f"rolling restart: {len(answers)} answers in {time.monotonic() - started:.1f} s")
