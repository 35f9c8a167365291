"""Every multi-key Redis call of the gateway names keys of one hash slot (Redis Cluster runs a
script, an MGET or a MULTI only then): the limiter's scripts as they are really sent, and the key
builders of the thinking store, signed kinds, cooldowns, prefix digest and checkpoints.

The limiter runs against the suite's Redis with every feature on (spend cap, key and org
concurrency, two candidate deployments, a seed, settle with leases, failover slots, heartbeats);
a spy records the keys of each script call on their way out and passes the call on unchanged.
tests/infra/test_redis_cluster.py runs the same calls against a real Redis Cluster.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.commands.core import AsyncScript
from redis.crc import key_slot

from core.redis_clients import tag
from gateway import prefix_digest
from gateway.checkpoints import RedisStore
from gateway.limits.redis import RedisLimiter
from gateway.limits.redis_conn import notify_credit_redis, open_holds_redis
from gateway.limits.resp import RespClient
from gateway.routing import cooldown_key
from gateway.signed_kinds import SignedKinds
from gateway.thinking_store import ThinkingStore
from tests.gateway.limits.conftest import REDIS_URL, StaticMoney, delete_prefix, new_prefix, req


def slots(keys: list[str]) -> set[int]:
    return {key_slot(k.encode()) for k in keys}


@pytest.fixture
async def untagged_prefix() -> AsyncIterator[str]:
    # The production shape: a plain prefix (`ezat:`) the limiter turns into a hash tag.
    p = new_prefix().replace("{", "").replace("}", "")
    yield p
    await delete_prefix(tag(p))


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    """(script's first line, keys) of every script call, from both of the limiter's clients."""
    calls: list[tuple[str, list[str]]] = []
    lean = RespClient.evalsha
    pooled = AsyncScript.__call__

    async def lean_spy(self: RespClient, script: Any, keys: list[str], args: list[Any]) -> Any:
        calls.append((script.sha, list(keys)))
        return await lean(self, script, keys, args)

    async def pooled_spy(self: AsyncScript, keys: Any = None, args: Any = None, client: Any = None):
        calls.append((self.sha, [str(k) for k in keys or []]))
        return await pooled(self, keys=keys, args=args, client=client)

    monkeypatch.setattr(RespClient, "evalsha", lean_spy)
    monkeypatch.setattr(AsyncScript, "__call__", pooled_spy)
    return calls


@pytest.mark.parametrize("lean", [True, False], ids=["lean-client", "redis-py"])
async def test_every_limiter_script_names_one_slot(
    untagged_prefix: str, sent: list[tuple[str, list[str]]], lean: bool, settings: Any
) -> None:
    money = StaticMoney()
    money.org[1] = 10**12
    lim = RedisLimiter(
        REDIS_URL, prefix=untagged_prefix, money=money, lean_client=lean, heartbeat=False
    )
    try:
        admit = req(
            request_id="a",
            hold_nano=10,
            spend_cap_nano=10**9,
            key_concurrency=5,
            org_concurrency=5,
            candidates=((5, 2), (6, 2)),
        )
        await lim.admit(admit)  # needs a seed: ADMIT, SEED ×2, ADMIT
        assert await lim.acquire_slot("a", 6, 2, org_id=1)
        await lim.release_slot("a", 6)
        await lim.heartbeat()
        assert (await lim.in_flight([5, 6, 7]))[5] == 1
        await lim.settle("a", key_id=1, org_id=1, hold_nano=10, cost_nano=7, deployment_id=5)
        await lim.admit(req(request_id="b", candidates=((5, 2),)))
        await lim.settle("b", key_id=1, org_id=1, hold_nano=0, cost_nano=0, deployment_id=5)
        assert await lim.open_holds(1) == 0
    finally:
        await lim.aclose()
    notify_credit_redis(REDIS_URL, untagged_prefix, 1, 5)
    assert open_holds_redis(REDIS_URL, untagged_prefix, 1) == 0

    # Every script ran, several with many keys; none of them crossed a slot.
    assert len({sha for sha, _ in sent}) >= 7
    assert max(len(keys) for _, keys in sent) >= 15
    for sha, keys in sent:
        assert all(k.startswith(tag(untagged_prefix)) for k in keys), keys
        assert len(slots(keys)) == 1, (sha, keys)


def test_the_limiter_prefix_becomes_one_hash_tag() -> None:
    assert tag("ezat:") == "{ezat}:"
    assert tag("acme-prod:") == "{acme-prod}:"
    assert tag("{mine}:ezat:") == "{mine}:ezat:"  # an operator's own tag is kept
    # Keys of different orgs, keys and deployments: one slot.
    names = ["org:1", "org:2:hold", "rpm:9", "kmon:9:202612", "slots:5:o:1", "conc:o:3"]
    assert len(slots([tag("ezat:") + n for n in names])) == 1


def test_the_other_multi_key_calls_name_one_slot() -> None:
    tools = [f"toolu_{n:04d}" for n in range(50)]
    # One thinking lookup (MGET) or put (pipeline) names one org's tool calls.
    assert len(slots([ThinkingStore._key(42, t) for t in tools])) == 1
    # One signed-kind lookup (MGET) or write names one org's signatures.
    assert len(slots([SignedKinds._key(42, f"sig-{t}") for t in tools])) == 1
    # A cooldown sync (MGET) names all of a request's deployments.
    assert len(slots([cooldown_key(d) for d in range(1, 200)])) == 1
    # The prefix digest's flush (a script) and read (MGET): session and prefix keys.
    digest = [prefix_digest.key_prefix() + f"s:{n:032x}" for n in range(20)]
    digest += [prefix_digest.key_prefix() + f"p:{n:032x}:{n % 3}" for n in range(20)]
    assert len(slots(digest)) == 1
    # A checkpoint write (MULTI): the process's hash, its heartbeat key, the set of processes.
    store = RedisStore(REDIS_URL, "ezat:")
    other = RedisStore(REDIS_URL, "ezat:")
    names = [store._hash(store.process), store._alive(store.process), store._procs]
    names += [other._hash(other.process), other._alive(other.process)]
    assert len(slots(names)) == 1


@pytest.mark.parametrize("prefix", ["inst-b:", "{inst-b}:"])
def test_every_key_builder_starts_with_the_installation_prefix(settings, prefix: str) -> None:  # type: ignore[no-untyped-def]
    """Issue 31 item 8: EZAT_REDIS_PREFIX reaches every family (the routing digest, cooldowns,
    the thinking store and signed kinds used a fixed `ezat:`), and each family still names one
    slot per multi-key call with a prefix that is, or is not, a hash tag itself."""
    settings.EZAT_REDIS_PREFIX = prefix
    starts = (prefix, tag(prefix))
    families = {
        "thinking": [ThinkingStore._key(42, f"toolu_{n}") for n in range(20)],
        "sigkind": [SignedKinds._key(42, f"sig-{n}") for n in range(20)],
        "cooldown": [cooldown_key(d) for d in range(1, 50)],
        "route": [prefix_digest.key_prefix() + f"s:{n:032x}" for n in range(20)],
    }
    store = RedisStore(REDIS_URL, prefix)
    families["ckpt"] = [store._hash(store.process), store._alive(store.process), store._procs]
    for name, keys in families.items():
        assert all(k.startswith(starts) for k in keys), (name, keys[:3])
        assert len(slots(keys)) == 1, name
