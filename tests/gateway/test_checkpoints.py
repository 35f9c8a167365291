"""Stream checkpoints and key lookups when the database fails (issue 13, item 2): the parts that
need no running gateway. The crash itself is tested end to end (tests/billing/test_durable_usage.py).
"""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
from django.db import OperationalError

from accounts import keycache, keys
from catalog.pricing import Prices, PriceSchedule, PriceTier, TokenCounts
from gateway.checkpoints import FileStore, schedule_from_json, schedule_to_json
from gateway.durability import LOST_OUTCOME, usage_from_checkpoint

LOW = Prices.from_decimals(Decimal(3), Decimal(15), Decimal("0.3"), Decimal("3.75"), Decimal(6))
HIGH = Prices.from_decimals(
    Decimal(6), Decimal("22.5"), Decimal("0.6"), Decimal("7.5"), Decimal(12)
)


def entry(request_id: str = "req-1") -> dict[str, object]:
    schedule = PriceSchedule(version=7, tiers=(PriceTier(200_000, LOW), PriceTier(None, HIGH)))
    return {
        "request_id": request_id,
        "limits_id": f"{request_id}~abc",
        "org_id": 3,
        "key_id": 5,
        "key_prefix": "ezat_sk_ab",
        "api": "chat",
        "stream": True,
        "model_id": "anthropic/claude-sonnet-5-5",
        "model_name": "sonnet",
        "requested_model": "anthropic/claude-sonnet-5-5",
        "deployment": "sim-a",
        "started_at": datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=UTC).isoformat(),
        "hold_nano": 9_000_000,
        "slot": 11,
        "pricing": schedule_to_json(schedule),
        "tokens": {
            "input": 100,
            "output": 40,
            "cache_read": 0,
            "cache_write_5m": 0,
            "cache_write_1h": 0,
            "reasoning": 0,
        },
        "attempts": [{"model": "anthropic/claude-sonnet-5-5", "outcome": "ok"}],
        "ttft_ms": 80,
        "updated_at": datetime(2026, 12, 1, 12, 0, 3, tzinfo=UTC).timestamp(),
    }


def test_price_schedule_survives_the_checkpoint_round_trip() -> None:
    schedule = PriceSchedule(version=7, tiers=(PriceTier(200_000, LOW), PriceTier(None, HIGH)))
    assert schedule_from_json(orjson.loads(orjson.dumps(schedule_to_json(schedule)))) == schedule


def test_a_checkpoint_becomes_estimated_usage_at_the_admitted_prices() -> None:
    data = usage_from_checkpoint(orjson.loads(orjson.dumps(entry())))
    assert data.output_exact is False
    assert data.attempts[-1]["outcome"] == LOST_OUTCOME
    assert data.started_at == datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=UTC)  # identity
    assert data.tokens == TokenCounts(input=100, output=40)
    assert data.pricing.version == 7 and data.latency_ms == 2877
    assert data.cost_nano == 100 * 3_000 + 40 * 15_000  # the first tier: the prompt is small


def test_file_checkpoints_of_a_live_process_are_not_swept_until_it_dies(tmp_path: Path) -> None:
    live, sweeper = FileStore(tmp_path), FileStore(tmp_path)

    async def scenario() -> None:
        await live.write({"req-1~abc": orjson.dumps(entry())})
        assert await sweeper.dead() == []  # its lock is held: alive
        fd, live._lock_fd = live._lock_fd, None
        assert fd is not None
        os.close(fd)  # what a SIGKILL does to the lock
        [(process, entries)] = await sweeper.dead()
        assert process == live.process and entries[0]["request_id"] == "req-1"
        await sweeper.forget(process)
        assert await sweeper.dead() == [] and list(tmp_path.iterdir()) == []

    asyncio.run(scenario())


def test_an_empty_snapshot_removes_the_file(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def scenario() -> None:
        await store.write({"a": orjson.dumps(entry("a"))})
        assert (tmp_path / f"ckpt-{store.process}.json").exists()
        await store.write({})
        assert not (tmp_path / f"ckpt-{store.process}.json").exists()
        await store.close()

    asyncio.run(scenario())
    assert list(tmp_path.iterdir()) == []


def test_key_lookup_db_failure_raises_unavailable_and_a_cached_key_serves_until_its_ttl(
    monkeypatch: pytest.MonkeyPatch, settings: object
) -> None:
    cache = keycache.KeyCache()
    secret = keys.generate()
    info = keycache.KeyInfo(id=1, org_id=2, prefix="p", rpm_limit=10, spend_cap_nano=None)
    calls = {"n": 0}

    def fetch(_: str) -> keycache.KeyInfo | None:
        calls["n"] += 1
        if calls["n"] > 1:
            raise OperationalError("connection refused")
        return info

    monkeypatch.setattr(keycache, "_fetch", fetch)
    settings.EZAT_KEY_CACHE_TTL = 60  # type: ignore[attr-defined]

    async def scenario() -> None:
        assert await cache.lookup(secret) == info
        assert await cache.lookup(secret) == info  # cached: the database is not asked
        cache._entries._entries[keys.hash_key(secret)] = (0.0, info)  # the TTL has passed
        with pytest.raises(keycache.KeyLookupUnavailable):
            await cache.lookup(secret)

    asyncio.run(scenario())
    assert calls["n"] == 2


# --- the first checkpoint of a stream: right after its first token, not at the next interval ---------
class RecordingStore:
    """A checkpoint store that keeps every write and add in memory."""

    process = "test-process"

    def __init__(self) -> None:
        self.writes: list[dict[str, bytes]] = []
        self.adds: list[dict[str, bytes]] = []
        self.added = asyncio.Event()

    async def write(self, entries: dict[str, bytes]) -> None:
        self.writes.append(dict(entries))

    async def add(self, entries: dict[str, bytes]) -> None:
        self.adds.append(dict(entries))
        self.added.set()

    async def dead(self) -> list[tuple[str, list[dict[str, object]]]]:
        return []

    async def forget(self, process: str) -> None:
        return None

    async def close(self) -> None:
        return None


def _stream(name: str) -> tuple[object, object]:
    from types import SimpleNamespace

    from gateway.usage import UsageTracker

    schedule = PriceSchedule(version=7, tiers=(PriceTier(None, LOW),))
    exchange = SimpleNamespace(
        request_id=name,
        limits_id=f"{name}~x",
        key=SimpleNamespace(org_id=3, id=5, prefix="ezat_sk_ab"),
        api="messages",
        stream=True,
        model=SimpleNamespace(id="m", pricing=schedule, prompt_caching=True),
        sent_name="m",
        requested_id="m",
        route=None,
        started_at=datetime(2026, 12, 1, tzinfo=UTC),
        hold_nano=1,
        slot=None,
        attempts=[],
        ttft_ms=5,
    )
    tracker = UsageTracker()
    tracker.absorb("message_start", {"message": {"usage": {"input_tokens": 100}}})
    tracker.absorb("content_block_delta", {"delta": {"type": "text_delta", "text": "abcdefghi"}})
    return exchange, tracker


def test_a_stream_is_checkpointed_right_after_its_first_token_not_at_the_interval(
    settings: object,
) -> None:
    from gateway.checkpoints import Checkpoints

    settings.EZAT_CHECKPOINT_INTERVAL = 60  # type: ignore[attr-defined]
    settings.EZAT_CHECKPOINT_FIRST_WRITE_DELAY = 0.01  # type: ignore[attr-defined]
    store = RecordingStore()
    checkpoints = Checkpoints()

    async def scenario() -> None:
        checkpoints._bind()
        checkpoints._store = store  # type: ignore[assignment]
        first, first_tracker = _stream("req-a")
        checkpoints.open(first, first_tracker)  # type: ignore[arg-type]
        await asyncio.wait_for(store.added.wait(), 10)
        [added] = store.adds
        assert list(added) == ["req-a~x"]
        tokens = orjson.loads(added["req-a~x"])["tokens"]
        assert (tokens["input"], tokens["output"]) == (100, 3)  # 9 characters: 3 tokens
        assert store.writes == []  # no periodic write: the interval is a minute away
        # A stream opening while the writer sleeps wakes it; only the new entry is written.
        store.added.clear()
        second, second_tracker = _stream("req-b")
        checkpoints.open(second, second_tracker)  # type: ignore[arg-type]
        await asyncio.wait_for(store.added.wait(), 10)
        assert [list(a) for a in store.adds] == [["req-a~x"], ["req-b~x"]]
        # A stream that ended before its first write is not written at all.
        store.added.clear()
        third, third_tracker = _stream("req-c")
        checkpoints.open(third, third_tracker)  # type: ignore[arg-type]
        checkpoints.close(third)  # type: ignore[arg-type]
        await asyncio.sleep(0.1)
        assert len(store.adds) == 2 and store.writes == []
        await checkpoints.aclose()

    asyncio.run(scenario())


def test_file_entries_added_after_the_last_snapshot_are_swept_with_it(tmp_path: Path) -> None:
    live, sweeper = FileStore(tmp_path), FileStore(tmp_path)
    old, new = entry("req-old"), entry("req-new")

    async def scenario() -> list[tuple[str, list[dict[str, object]]]]:
        await live.write({"req-old~abc": orjson.dumps(old)})
        # A stream's first checkpoint: appended (O(new entries)), not a rewrite of every entry.
        await live.add({"req-new~abc": orjson.dumps(new)})
        await live.add(
            {"req-new~abc": orjson.dumps({**new, "tokens": {**new["tokens"], "output": 41}})}
        )  # type: ignore[dict-item]
        assert await sweeper.dead() == []  # alive
        os.close(live._lock_fd)  # type: ignore[arg-type]  # the process dies (lock released)
        return await sweeper.dead()

    [(process, entries)] = asyncio.run(scenario())
    assert process == live.process
    by_id = {e["request_id"]: e for e in entries}
    assert set(by_id) == {"req-old", "req-new"}
    assert by_id["req-new"]["tokens"]["output"] == 41  # the later line of a stream wins
    asyncio.run(sweeper.forget(process))
    assert list(tmp_path.iterdir()) == []


def test_a_snapshot_replaces_the_added_entries(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def scenario() -> None:
        await store.add({"req-1~abc": orjson.dumps(entry("req-1"))})
        assert (tmp_path / f"ckpt-{store.process}.new").exists()
        await store.write({"req-2~abc": orjson.dumps(entry("req-2"))})
        assert not (tmp_path / f"ckpt-{store.process}.new").exists()
        await store.close()

    asyncio.run(scenario())
