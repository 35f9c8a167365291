"""Checks both multi-node topologies run: the HAProxy cluster (tests/cluster) and the Redis
Cluster behind PgBouncer (tests/infra). A key's RPM and spend cap hold when its requests land on
every node, and a cooldown one node sets is the others' too."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from tests.cluster.traffic import Answer, call, drive


class BillsOrgs(Protocol):
    def usage(self, **filters: Any) -> list[Any]: ...


def assert_rpm_shared(url: str, secret: str, limit: int, count: int, nodes: Iterable[str]) -> None:
    """`count` requests at once: the nodes share one counter, so the sum of the answers over
    them is the limit (per minute window the burst crossed), and every node answered and
    refused some."""
    minute_before = int(time.time() // 60)
    answers = drive(url, secret, count, kinds=("chat", "messages"), max_retries=0)
    windows = int(time.time() // 60) - minute_before + 1  # 2 when the burst crossed a minute
    ok = [a for a in answers if a.ok]
    limited = [a for a in answers if a.status == 429]
    assert len(ok) + len(limited) == len(answers), [a for a in answers if not a.ok][:3]
    assert limit <= len(ok) <= limit * windows, (len(ok), windows)
    assert {a.node for a in ok} == set(nodes)
    assert {a.node for a in limited} == set(nodes)


def assert_cap_holds(
    ctx: BillsOrgs,
    url: str,
    key: Any,
    cap_nano: int,
    cost: tuple[int, int],
    nodes: Iterable[str],
) -> list[Answer]:
    """Requests at once against a key capped at `cap_nano`: some answered, the rest refused
    with a 4xx, every node took part, and the org spent at most the cap plus one in-flight hold.
    Returns the answered ones.

    `cost` is one request's (hold, real cost). There are enough requests that their real cost
    alone overruns the cap by a dozen: refusals must not hang on how many holds happen to be in
    flight at once (a fast upstream answers some before the next is admitted)."""
    one_hold, one_cost = cost
    count = cap_nano // one_cost + 12
    answers = drive(url, key.secret, count, kinds=("chat", "messages"), max_retries=0)
    ok = [a for a in answers if a.ok]
    refused = [a for a in answers if not a.ok]
    assert ok and refused, (len(ok), len(refused), count)
    assert all(a.status is not None and 400 <= a.status < 500 for a in refused), refused[:3]
    assert {a.node for a in ok} | {a.node for a in refused} == set(nodes)
    spent = sum(r.cost_nano for r in ctx.usage(org_id=key.org_id))
    assert spent <= cap_nano + one_hold, (spent, cap_nano, one_hold)
    return ok


def fail_until_cooling(url: str, secret: str, cooling: Callable[[], bool], node: str) -> None:
    """Requests through one node while the failing deployment is scripted to 529, until that
    node's failures have put it in cooldown (each answered by failover to the other)."""
    n = 0
    while not cooling():
        answer = call(url, secret, "messages", f"cooldown {node} {n}")
        assert answer.ok, answer
        n += 1
        assert n < 200, f"{node} never put the deployment in cooldown"
