"""The gateway behind a real Redis Cluster and a real PgBouncer in transaction mode
(tests/infra/conftest.py): requests billed exactly once and reconciled through the pooler, and
the limits (RPM, spend cap holds), cooldowns and the thinking store holding across two nodes on
a three-primary cluster."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis.crc import key_slot

from gateway.routing import cooldown_key
from tests.cluster.metrics import node_metric
from tests.cluster.shared_limits import assert_cap_holds, assert_rpm_shared, fail_until_cooling
from tests.cluster.traffic import call, drive, second_turns_sent, thinking_tool_loop
from tests.infra.conftest import NODES, InfraContext
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def _metric(url: str, name: str) -> dict[str, float]:
    """One node's samples of `name`, by their labels."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return {
        ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def assert_nothing_swallowed(infra: InfraContext) -> None:
    """No node fell back on anything: no Redis call failed (a CROSSSLOT or MOVED error would be
    counted here, not raised), no usage record went to the spool instead of PostgreSQL."""
    for node in infra.cluster.nodes.values():
        assert not any(_metric(node.url, "ezat_side_effect_failures_total").values()), node.url
        # (A lease that lapsed before its heartbeat is the machine's load, not Redis failing.)
        errors = _metric(node.url, "ezat_limiter_errors_total")
        assert not any(v for op, v in errors.items() if op != "op=lease_lapsed"), errors
        assert not any(_metric(node.url, "ezat_limiter_fail_open_total").values()), node.url
        assert not any(_metric(node.url, "ezat_usage_spooled_total").values()), node.url


def test_traffic_through_pgbouncer_is_billed_once(infra: InfraContext) -> None:
    before = _pooled_transactions(infra)
    key = infra.new_key()
    answers = drive(infra.url, key.secret, 40)
    assert all(a.ok for a in answers), [a for a in answers if not a.ok][:3]
    assert set(Counter(a.node for a in answers)) == set(NODES)
    # Recorded by the usage writers, reconciled by the Celery worker, check_ledger clean.
    infra.assert_billed_once(answers)
    assert len(infra.usage(org_id=key.org_id)) == len(answers)
    # It all went through the pooler, whose few server sessions served many clients' transactions.
    assert _pooled_transactions(infra) > before + len(answers)
    (pool,) = [p for p in infra.pgbouncer.show("POOLS") if p["database"] == infra.database]
    assert pool["pool_mode"] == "transaction"
    assert "prepared statement" not in infra.pgbouncer.log()
    assert_nothing_swallowed(infra)


def _pooled_transactions(infra: InfraContext) -> int:
    stats = [s for s in infra.pgbouncer.show("STATS") if s["database"] == infra.database]
    return sum(int(str(s["total_xact_count"])) for s in stats)


def test_rpm_is_enforced_across_nodes_on_a_redis_cluster(infra: InfraContext) -> None:
    key = infra.new_key(rpm=12)
    assert_rpm_shared(infra.url, key.secret, 12, 30, NODES)
    assert_nothing_swallowed(infra)


def test_spend_cap_holds_across_nodes_on_a_redis_cluster(infra: InfraContext) -> None:
    one_hold, one_cost = cost = infra.hold_and_cost()
    cap_nano = max(one_cost * 10, one_hold * 3)
    key = infra.new_key(cap_nano=cap_nano)
    assert_cap_holds(infra, infra.url, key, cap_nano, cost, NODES)
    # The holds are in the cluster, on the limiter's one slot, and all released.
    client = infra.redis_cluster.client()
    assert int(client.hget(f"{{ezat}}:org:{key.org_id}", "held") or 0) == 0
    assert_nothing_swallowed(infra)


def test_cooldown_and_thinking_store_are_shared_through_the_cluster(
    infra: InfraContext,
) -> None:
    from catalog.models import Deployment

    key = infra.new_key()
    client = infra.redis_cluster.client()
    with infra.blocker.unblock():
        failing = Deployment.objects.get(name="cl-b")
    sim = infra.sims["cl-b"]
    sim.script({"status": 529, "times": -1})
    i1, i2 = (infra.cluster.nodes[n].url for n in NODES)
    try:
        fail_until_cooling(
            i1, key.secret, lambda: bool(client.exists(cooldown_key(failing.id))), "i1"
        )

        # i2 reads cooldowns at most once a second, in the background of a request: warm it up
        # (answered by failover) until its own gauge shows the cooldown, a condition rather
        # than a sleep of one sync period that a busy machine outlasts.
        def synced() -> bool:
            assert call(i2, key.secret, "messages", "warm up").ok
            return node_metric(i2, "ezat_deployments_cooling") >= 1

        wait_for(synced, what="i2 to read cl-b's cooldown from Redis", interval=0.5)
        seen = len(sim.requests())
        for i in range(10):
            assert call(i2, key.secret, ("messages", "chat")[i % 2], f"i2 after {i}").ok
        assert len(sim.requests()) == seen, "i2 sent a request to a cooling deployment"
    finally:
        sim.clear_script()
        client.delete(cooldown_key(failing.id))

    # A thinking tool loop whose turns land on both nodes: the second finds the first's signed
    # thinking block in the cluster (keys tagged by org), on the primary that owns the org's tag,
    # whichever node wrote it.
    loop = thinking_tool_loop(
        infra.url,
        key.secret,
        "Tromsø",
        "-2°C and snow",
        between=lambda: wait_for(
            lambda: infra.redis_cluster.scan(f"ezat:thinking:{{{key.org_id}}}:*"),
            what="the thinking block in the cluster",
        ),
    )
    assert loop.first_node != loop.second_node
    assert loop.answer == "Tool said: -2°C and snow"
    (sent,) = second_turns_sent(infra.sims.values(), "Tromsø")
    assert [b["type"] for b in sent["messages"][1]["content"]] == ["thinking", "tool_use"]
    assert_nothing_swallowed(infra)


def test_the_limiter_lives_on_one_slot_and_other_state_elsewhere(infra: InfraContext) -> None:
    """The limiter's keys share one slot (one primary); the prefix digest, cooldowns and the
    thinking store (tagged by org) land wherever their own tags hash."""
    key = infra.new_key()
    assert all(a.ok for a in drive(infra.url, key.secret, 6))
    client = infra.redis_cluster.client()
    limiter_keys = list(client.scan_iter(match="{ezat}:*"))
    assert limiter_keys
    assert {key_slot(k.encode()) for k in limiter_keys} == {key_slot(b"{ezat}:")}
    # The prefix digest's keys are flushed in the background, on another primary than the
    # limiter's ({route} and {ezat} hash to different thirds of the slots).
    wait_for(
        lambda: sum(1 for n in infra.redis_cluster.keys_per_node().values() if n) >= 2,
        what="keys on two primaries of the cluster",
    )
