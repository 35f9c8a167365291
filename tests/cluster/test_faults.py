"""The cluster's shared parts broken under traffic (issue 18, "Bad input and faults"): a Celery
worker killed mid-batch, the cluster's Redis restarted, PostgreSQL gone and back, and the load
balancer sending requests to a node that is shutting down. Each test uses its own key and
leaves the cluster whole for the next one; every wait is on a condition with a deadline.

PostgreSQL is the suite's shared server, so it is never restarted: the gateways reach it through
a proxy that the test cuts (tests/cluster/harness.py `PgProxy`), which is what a restart looks
like from them (connections closed, new ones refused, then accepted again)."""

from __future__ import annotations

import math
import re
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import redis

from billing.reconcile import TEST_SLEEP_ENV, TEST_SLEEP_MARKER
from core.redis_clients import tag
from tests.billing.harness import CeleryWorker
from tests.cluster.conftest import NODE_ENV, NODES, ClusterContext
from tests.cluster.metrics import cluster_metric, node_metric
from tests.cluster.traffic import Answer, Load, call, drive
from tests.support.chat_support import SONNET
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

FAILOPEN_FRACTION = 0.5  # EZAT_FAILOPEN_RPM_FRACTION's default (docs/settings.md)


@contextmanager
def held_streams(cluster: ClusterContext, url: str, marker: str, count: int) -> Iterator[Any]:
    """`count` streams opened on `url` and paused upstream after their first events; the
    caller's block runs while they are open, `release()` lets them finish, and their answers
    are in the returned list once the block ends."""
    for sim in cluster.sims.values():
        sim.script({"match": marker, "pause_after_events": 3, "pause": 120, "times": -1})
    key = cluster.new_key()
    answers: list[Answer] = []
    kinds = ("chat-stream", "messages-stream")
    threads = [
        threading.Thread(
            target=lambda n=n: answers.append(
                call(url, key.secret, kinds[n % 2], f"{marker} {n}", max_retries=0)
            ),
            daemon=True,
        )
        for n in range(count)
    ]
    for thread in threads:
        thread.start()

    def opened() -> bool:
        return (
            sum(marker in str(r.get("body")) for s in cluster.sims.values() for r in s.requests())
            >= count
        )

    def release() -> None:
        for sim in cluster.sims.values():
            sim.clear_script()
            sim.release()

    class Held:
        def __init__(self) -> None:
            self.answers = answers
            self.release = release

        def join(self) -> list[Answer]:
            for thread in threads:
                thread.join(120)
            assert len(answers) == count, answers
            return answers

    try:
        wait_for(opened, 60, what=f"{count} streams held open upstream")
        yield Held()
    finally:
        release()
        for thread in threads:
            thread.join(120)


def test_celery_worker_killed_mid_batch_loses_and_double_charges_nothing(
    cluster: ClusterContext,
) -> None:
    """A third worker stops every batch after all its writes and before its commit
    (billing/reconcile.py's fault injection) and takes its share of beat's tasks beside the
    cluster's two; it is SIGKILLed (main process and pool) while it holds a batch. The batch's
    transaction dies with its connection; the other workers charge those records, once."""
    key = cluster.new_key()
    slow = CeleryWorker(
        "celery",
        cluster.cluster.directory / "worker-slow.log",
        concurrency=1,
        env={**cluster.cluster.worker_env, TEST_SLEEP_ENV: "300"},
    )
    marker = (
        rf"{re.escape(TEST_SLEEP_MARKER)}: pid=\d+ sleeping [\d.]+s before commit \((\d+) records\)"
    )
    try:
        with Load(cluster.url, key.secret, threads=4, text="reconcile") as load:
            (hit,) = slow.wait_for(marker, timeout=180)
            assert int(hit.group(1)) > 0
            slow.kill_all(signal.SIGKILL)
            after = load.count()
            wait_for(lambda: load.count() >= after + 10, 120, what="traffic after the kill")
    finally:
        slow.kill_all(signal.SIGKILL)
    answers = load.answers
    assert all(a.ok for a in answers), [a for a in answers if not a.ok][:3]
    cluster.assert_billed_once(answers)  # nothing lost, check_ledger clean: nothing charged twice
    assert len(cluster.usage(org_id=key.org_id)) == len(answers)


def _count_tokens(url: str, secret: str) -> int:
    answer = httpx.post(
        url + "/v1/messages/count_tokens",
        headers={"x-api-key": secret, "anthropic-version": "2023-06-01"},
        json={"model": SONNET, "messages": [{"role": "user", "content": "count me"}]},
        timeout=60,
    )
    return answer.status_code


def _held(client: redis.Redis, org_id: int) -> int:
    """The org's money held by requests in flight, read from the limiter's org hash (which must
    exist: a wrong key name would read 0 and pass every check)."""
    key = tag("ezat:") + f"org:{org_id}"
    assert client.exists(key), f"no limiter state at {key}"
    return int(client.hget(key, "held") or 0)


def test_redis_restarted_mid_traffic(cluster: ClusterContext) -> None:
    """The cluster's Redis (limits, holds, cooldowns, thinking store) SIGKILLed under traffic
    and started again empty. While it is down: money fails closed (a 503, nothing upstream),
    free requests fail open on each node's own limiter at the documented fraction of the RPM.
    After: the money state is rebuilt from PostgreSQL (a spend cap half used before the restart
    still holds), no hold is left behind or negative, every answer is billed once."""
    nodes = cluster.cluster.nodes
    server = cluster.cluster.redis
    assert server is not None
    client = redis.Redis.from_url(cluster.cluster.redis_url)
    one_hold, one_cost = cluster.hold_and_cost()
    cap_nano = max(one_cost * 12, one_hold * 4)
    capped = cluster.new_key(cap_nano=cap_nano)
    # Nearly half the cap spent before the restart: more than one hold, so a money state rebuilt
    # from nothing (not from the database) would let the spend pass the bound checked below.
    # Two callers at a time: the spend plus two in-flight holds (each at most a quarter of the
    # cap) stays below the cap, so none of these is refused.
    before = drive(
        cluster.url,
        capped.secret,
        math.ceil(cap_nano / 2 / one_cost) - 1,
        kinds=("chat",),
        threads=2,
    )
    assert all(a.ok for a in before), [a for a in before if not a.ok][:3]
    assert sum(r.cost_nano for r in cluster.usage(org_id=capped.org_id)) > one_hold
    rpm = 10
    free = cluster.new_key(rpm=rpm)
    loaded = cluster.new_key()
    fail_open_before = {
        n: node_metric(g.url, "ezat_limiter_fail_open_total") for n, g in nodes.items()
    }
    per_node = 8
    with Load(cluster.url, loaded.secret, threads=4, text="redis", max_retries=0) as load:
        wait_for(lambda: load.count() >= 8, 120, what="traffic")
        server.crash()
        down = {}
        for name, gateway in nodes.items():
            paid = call(gateway.url, capped.secret, "messages", "while down", max_retries=0)
            assert paid.status == 503 and "unreachable" in (paid.error or ""), paid
            down[name] = [_count_tokens(gateway.url, free.secret) for _ in range(per_node)]
        seeds_while_down = cluster_metric(cluster, "ezat_limiter_seeds_total")
        server.start_again()
        cluster.lb.wait_states(dict.fromkeys(NODES, "UP"))
        after = sum(a.ok for a in load.answers)
        wait_for(lambda: sum(a.ok for a in load.answers) >= after + 10, 120, what="traffic after")
    allowed = math.floor(rpm * FAILOPEN_FRACTION)
    for name, statuses in down.items():
        assert set(statuses) <= {200, 429}, (name, statuses)
        # One node's fallback allows its fraction per minute (twice at a minute's edge).
        assert allowed <= statuses.count(200) <= 2 * allowed, (name, statuses)
        took_fallback = node_metric(nodes[name].url, "ezat_limiter_fail_open_total")
        assert took_fallback - fail_open_before[name] >= per_node, name
    answers = load.answers
    failed = [a for a in answers if not a.ok]
    assert failed and all(a.status == 503 for a in failed), failed[:3]
    # Money state rebuilt from the database: the capped key's spend before the restart counts.
    assert cluster_metric(cluster, "ezat_limiter_seeds_total") > seeds_while_down
    # Enough requests that their real cost alone overruns what is left of the cap by a dozen, so
    # refusals do not hang on how many holds are in flight at once.
    left = cap_nano - sum(r.cost_nano for r in cluster.usage(org_id=capped.org_id))
    after_restart = drive(
        cluster.url, capped.secret, left // one_cost + 12, kinds=("chat", "messages"), max_retries=0
    )
    assert any(a.ok for a in after_restart)
    refused = [a for a in after_restart if not a.ok]
    assert refused and all(a.status is not None and 400 <= a.status < 500 for a in refused)
    spent = sum(r.cost_nano for r in cluster.usage(org_id=capped.org_id))
    assert spent <= cap_nano + one_hold, (spent, cap_nano, one_hold)
    # Holds of requests cut by the restart went with the old server; a settle against the new
    # one never drives the count below zero, and nothing stays held once traffic is over.
    for key in (loaded, capped):

        def released(key: Any = key) -> bool:
            held = _held(client, key.org_id)
            assert held >= 0, held
            return held == 0

        wait_for(released, 60, what="no money held after the traffic")
    cluster.assert_billed_once(answers + before + after_restart)


def test_postgresql_gone_mid_traffic_loses_no_answered_request(cluster: ClusterContext) -> None:
    """Streams open on every node when PostgreSQL goes away finish: their usage records go to
    each node's durable spool (billing/spool.py) and are replayed once it is back. Meanwhile the
    nodes stay in the load balancer (/readyz says "degraded", not 503: PostgreSQL is shared, so
    failing readiness would take every node out at once) and go on serving the key they have
    cached, spooling its usage; what they cannot serve gets their own retryable 503. Nothing
    answered is lost, and nothing is held in memory."""
    proxy = cluster.cluster.pg_proxy
    assert proxy is not None
    key = cluster.new_key()
    # Where the records wait: the spool (direct), or the group-commit log, whose flusher
    # stores them once PostgreSQL is back (EZAT_USAGE_COMMIT=group, billing/usage_log.py).
    group = NODE_ENV["EZAT_USAGE_COMMIT"] == "group"
    if group:
        kept_name, stored_name = "ezat_usage_log_records_total", "ezat_usage_log_flushed_total"
    else:
        kept_name, stored_name = "ezat_usage_spooled_total", "ezat_usage_spool_replayed_total"
    spooled = cluster_metric(cluster, kept_name)
    replayed = cluster_metric(cluster, stored_name)
    with (
        held_streams(cluster, cluster.url, "pg held", 6) as held,
        Load(cluster.url, key.secret, threads=4, text="pg", max_retries=0) as load,
    ):
        wait_for(lambda: load.count() >= 8, 120, what="traffic")
        proxy.cut()
        try:
            held.release()
            streams = held.join()
            assert all(a.ok for a in streams), streams
            assert {a.node for a in streams} == set(NODES)
            wait_for(
                lambda: cluster_metric(cluster, kept_name) >= spooled + 6,
                60,
                what="the held streams' records in the spool",
            )
            # Traffic goes on through the cut, on every node: readiness did not fail.
            at_cut = load.count()
            wait_for(lambda: load.count() >= at_cut + 12, 120, what="traffic during the cut")
            assert all(
                httpx.get(node.url + "/readyz", timeout=10).json()["status"] == "degraded"
                for node in cluster.cluster.nodes.values()
            )
            assert set(cluster.lb.states().values()) == {"UP"}, cluster.lb.states()
        finally:
            proxy.restore()
        # With the log every answer is logged, so under the ongoing load the flushed count
        # trails the logged one by the flush delay: what was logged up to now must be stored.
        logged_by_now = cluster_metric(cluster, kept_name)
        wait_for(
            lambda: (
                cluster_metric(cluster, stored_name) - replayed
                >= (logged_by_now if group else cluster_metric(cluster, kept_name)) - spooled
            ),
            120,
            what="the spool replayed",
        )
        after = sum(a.ok for a in load.answers)
        wait_for(lambda: sum(a.ok for a in load.answers) >= after + 10, 120, what="traffic")
    answers = load.answers
    failed = [a for a in answers if not a.ok]
    assert all(a.status == 503 for a in failed), failed[:3]
    assert cluster_metric(cluster, "ezat_usage_held_in_memory") == 0
    cluster.assert_billed_once(answers + streams)


def test_lb_sends_requests_to_a_draining_node(cluster: ClusterContext) -> None:
    """Between a node's SIGTERM and HAProxy's next failed check, the node is still in rotation.
    Health checks of n3 are paused so that window stays open: every request HAProxy sends to
    the draining n3 is refused with a retryable 503 (nothing ran) and HAProxy retries it on the
    next node (`retry-on 503`, `option redispatch`). Round-robin can land every one of its
    retries on n3 again (the other callers move its pointer), so now and then a caller gets the
    503 itself, with `x-should-retry`, and the SDK retries it. That is "answered", not dropped:
    such an answer is allowed, but only as n3's own retryable refusal, never as anything else
    (a 502, a cut connection, another node's error). The stream already running on n3
    finishes; nothing is dropped."""
    lb = cluster.lb
    node = cluster.cluster.nodes["n3"]
    key = cluster.new_key()
    lb.command("disable health gateways/n3")
    try:
        with held_streams(cluster, node.url, "drain held", 1) as held:
            before = lb.server_stats()["n3"]
            node.process.send_signal(signal.SIGTERM)
            wait_for(
                lambda: httpx.get(node.url + "/readyz", timeout=10).status_code == 503,
                60,
                what="n3 draining",
            )
            assert lb.states()["n3"] == "no check"  # in rotation, its checks paused

            def retried() -> int:
                now = lb.server_stats()["n3"]
                return sum(int(now[c] or 0) - int(before[c] or 0) for c in ("wretr", "wredis"))

            # Until HAProxy has sent n3 a few requests (one in three) and retried them.
            with Load(cluster.url, key.secret, threads=3, text="drain", max_retries=4) as load:
                wait_for(lambda: retried() >= 5 and load.count() >= 15, 120, what="retries")
            answers = load.answers
            held.release()
            (stream,) = held.join()
        node.process.wait(60)
    finally:
        lb.command("enable health gateways/n3")
    refused = [a for a in answers if not a.ok]
    assert all(a.status == 503 and a.node == "n3" for a in refused), refused[:3]
    served = [a for a in answers if a.ok]
    assert len(served) >= 15 and len(refused) <= len(answers) // 10, (len(served), refused[:3])
    assert "n3" not in {a.node for a in served}
    assert stream.ok and stream.node is None  # answered by n3 directly, past its SIGTERM
    cluster.assert_billed_once([*served, stream])
    assert not cluster.usage(request_id__in=[a.request_id for a in refused])  # nothing ran
    cluster.cluster.revive("n3")
    lb.wait_states({"n3": "UP"})
