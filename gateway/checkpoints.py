"""Checkpoints of open streams: what a stream has delivered, kept where another process finds it
if this one dies.

At a stream's commit point (its first token) the exchange registers here with its usage tracker.
Nothing is written per event: a background task snapshots every open stream of the process at
most once per EZAT_CHECKPOINT_INTERVAL (one write for all of them) with the request id, org,
key, price schedule, hold, capacity slot and the tokens delivered so far. The stream's end
(recorded, failed, or settled however) drops it from the next snapshot.

A new stream does not wait for the next interval: its entry is added within
EZAT_CHECKPOINT_FIRST_WRITE_DELAY of its first token (one write for every stream that committed
in that window, only their entries: a Redis HSET, or the file rewritten), so a process killed a
moment after a first token still leaves that stream's bill behind. The request itself never
waits for it: the registration is O(1) and the write is the background task's.

Where the snapshot goes:

- Redis, when the Redis limiter is used (REDIS_URL): one hash per process
  (`{ezat}:ckpt:<process>`: the limiter's prefix as a hash tag, so a write's MULTI is one slot
  of a Redis Cluster), its members in a set (`{ezat}:ckpt:procs`), and a heartbeat key
  with a TTL of EZAT_CHECKPOINT_STALE_SECONDS, renewed by every write. Every gateway node sees
  every other node's checkpoints; a process whose heartbeat expired is dead.
- Files otherwise (the embedded default): `ckpt-<process>.json`, replaced atomically (written,
  fsynced, renamed), plus `ckpt-<process>.new`, the entries of streams opened since (appended
  and fsynced, one JSON line each; removed by the next snapshot), beside a
  `ckpt-<process>.lock` the process holds an exclusive flock on for its life. A lock that can
  be taken means its process is gone.

The sweeper (gateway/durability.py) bills a dead process's checkpoints as estimated usage.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from django.conf import settings
from prometheus_client import Counter, Gauge
from redis.exceptions import RedisError

from catalog.pricing import Prices, PriceSchedule, PriceTier

if TYPE_CHECKING:
    from datetime import datetime

    from accounts.keycache import KeyInfo
    from catalog.snapshot import ModelInfo, Route
    from gateway.usage import UsageTracker

logger = logging.getLogger(__name__)

CHECKPOINT_WRITES = Counter(
    "ezat_checkpoint_writes_total", "Snapshots of this process's open streams written"
)
CHECKPOINT_FAILURES = Counter(
    "ezat_checkpoint_failures_total", "Checkpoint snapshots that could not be written"
)
OPEN_STREAMS = Gauge("ezat_checkpoint_open_streams", "Open streams with a checkpoint")


class CommittedExchange(Protocol):
    """What a checkpoint reads of a committed stream's exchange (gateway/exchange.py). The
    exchange registers itself here; this module names only what it reads, so that the two do not
    import each other."""

    request_id: str
    limits_id: str
    key: KeyInfo
    api: str
    stream: bool
    model: ModelInfo
    sent_name: str
    requested_id: str
    route: Route | None
    started_at: datetime
    hold_nano: int
    attempts: list[dict[str, Any]]
    ttft_ms: int | None

    @property
    def slot(self) -> int | None: ...


# --- what a checkpoint holds ------------------------------------------------------------------
def schedule_to_json(schedule: PriceSchedule) -> dict[str, Any]:
    return {
        "version": schedule.version,
        "tiers": [
            [
                t.up_to_prompt_tokens,
                t.prices.input,
                t.prices.output,
                t.prices.cache_read,
                t.prices.cache_write_5m,
                t.prices.cache_write_1h,
            ]
            for t in schedule.tiers
        ],
    }


def schedule_from_json(data: dict[str, Any]) -> PriceSchedule:
    tiers = tuple(
        PriceTier(
            up_to,
            Prices(input=i, output=o, cache_read=cr, cache_write_5m=cw5, cache_write_1h=cw1h),
        )
        for up_to, i, o, cr, cw5, cw1h in data["tiers"]
    )
    return PriceSchedule(version=int(data["version"]), tiers=tiers)


def fixed_part(exchange: CommittedExchange) -> bytes:
    """What a committed stream's checkpoint says that does not change until it ends (its route,
    hold, slot, prices and attempts are settled at the commit point), encoded once, without the
    closing brace: every snapshot after that dumps only the tokens and the time."""
    return orjson.dumps(
        {
            "request_id": exchange.request_id,
            "limits_id": exchange.limits_id,
            "org_id": exchange.key.org_id,
            "key_id": exchange.key.id,
            "key_prefix": exchange.key.prefix,
            "api": exchange.api,
            "stream": exchange.stream,
            "model_id": exchange.model.id,
            "model_name": exchange.sent_name,
            "requested_model": exchange.requested_id,
            "deployment": exchange.route.deployment.name if exchange.route else "",
            "started_at": exchange.started_at.isoformat(),
            "hold_nano": exchange.hold_nano,
            "slot": exchange.slot,
            "pricing": schedule_to_json(exchange.model.pricing),
            "attempts": exchange.attempts,
            "ttft_ms": exchange.ttft_ms,
        }
    )[:-1]


def encode(fixed: bytes, tracker: UsageTracker, exchange: CommittedExchange) -> bytes:
    """One checkpoint entry: the fixed part and the tokens delivered so far."""
    tokens = tracker.tokens(exchange.model)
    return (
        fixed
        + b',"tokens":'
        + orjson.dumps(
            {
                "input": tokens.input,
                "output": tokens.output,
                "cache_read": tokens.cache_read,
                "cache_write_5m": tokens.cache_write_5m,
                "cache_write_1h": tokens.cache_write_1h,
                "reasoning": tokens.reasoning,
            }
        )
        + b',"updated_at":'
        + orjson.dumps(time.time())
        + b"}"
    )


# --- where checkpoints are kept ---------------------------------------------------------------
class CheckpointStore(Protocol):
    process: str

    async def write(self, entries: dict[str, bytes]) -> None:
        """Replace this process's checkpoints with `entries` (renews its heartbeat)."""
        ...

    async def add(self, entries: dict[str, bytes]) -> None:
        """Add `entries` to this process's checkpoints (renews its heartbeat)."""
        ...

    async def dead(self) -> list[tuple[str, list[dict[str, Any]]]]:
        """Every dead process's checkpoints: (its id, its entries)."""
        ...

    async def forget(self, process: str) -> None:
        """Drop a dead process's checkpoints once they are billed."""
        ...

    async def close(self) -> None: ...


def _process_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class RedisStore:
    def __init__(self, url: str, prefix: str) -> None:
        from core.redis_clients import async_client, tag

        self.process = _process_id()
        # One hash tag (the limiter's, `{ezat}:`): a write is one MULTI over the process's hash,
        # its heartbeat key and the set of processes, which Redis Cluster runs only on one slot.
        self._prefix = tag(prefix)
        self._client = async_client(url, socket_timeout=5, socket_connect_timeout=5)

    def _hash(self, process: str) -> str:
        return f"{self._prefix}ckpt:{process}"

    def _alive(self, process: str) -> str:
        return f"{self._prefix}ckpt-alive:{process}"

    @property
    def _procs(self) -> str:
        return f"{self._prefix}ckpt:procs"

    async def write(self, entries: dict[str, bytes]) -> None:
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.delete(self._hash(self.process))
            if entries:
                ttl_ms = int(settings.EZAT_CHECKPOINT_STALE_SECONDS * 1000)
                pipe.hset(self._hash(self.process), mapping=entries)  # type: ignore[arg-type]
                pipe.set(self._alive(self.process), b"1", px=ttl_ms)
                pipe.sadd(self._procs, self.process)
            else:
                pipe.srem(self._procs, self.process)
                pipe.delete(self._alive(self.process))
            await pipe.execute()

    async def dead(self) -> list[tuple[str, list[dict[str, Any]]]]:
        found = []
        for raw in await self._client.smembers(self._procs):
            process = raw.decode()
            if process == self.process or await self._client.exists(self._alive(process)):
                continue
            values = await self._client.hvals(self._hash(process))
            found.append((process, [orjson.loads(v) for v in values]))
        return found

    async def add(self, entries: dict[str, bytes]) -> None:
        """Add (or replace) some entries, leaving the others; renews the heartbeat."""
        ttl_ms = int(settings.EZAT_CHECKPOINT_STALE_SECONDS * 1000)
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.hset(self._hash(self.process), mapping=entries)  # type: ignore[arg-type]
            pipe.set(self._alive(self.process), b"1", px=ttl_ms)
            pipe.sadd(self._procs, self.process)
            await pipe.execute()

    async def forget(self, process: str) -> None:
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.delete(self._hash(process))
            pipe.srem(self._procs, process)
            await pipe.execute()

    async def close(self) -> None:
        await self._client.aclose()


class FileStore:
    def __init__(self, directory: Path) -> None:
        self.process = _process_id()
        self._dir = directory
        self._lock_fd: int | None = None

    def _path(self, process: str, ext: str) -> Path:
        return self._dir / f"ckpt-{process}.{ext}"

    def _hold_lock(self) -> None:
        if self._lock_fd is None:
            self._dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._path(self.process, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._lock_fd = fd

    def _write(self, entries: dict[str, bytes]) -> None:
        self._hold_lock()
        path = self._path(self.process, "json")
        if not entries:
            path.unlink(missing_ok=True)
            self._path(self.process, "new").unlink(missing_ok=True)
            return
        tmp = self._path(self.process, "tmp")
        data = b"[" + b",".join(entries.values()) + b"]"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        # The snapshot has every open stream: the entries added since the last one are in it.
        self._path(self.process, "new").unlink(missing_ok=True)

    def _add(self, entries: dict[str, bytes]) -> None:
        """New streams' entries appended (one JSON line each) to `ckpt-<process>.new` and
        fsynced: O(new entries), not a rewrite of every open stream's."""
        self._hold_lock()
        data = b"\n".join(entries.values()) + b"\n"
        fd = os.open(
            self._path(self.process, "new"),
            os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
            0o600,
        )
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    async def write(self, entries: dict[str, bytes]) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._write, entries)

    async def add(self, entries: dict[str, bytes]) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._add, entries)

    def _dead(self) -> list[tuple[str, list[dict[str, Any]]]]:
        found: list[tuple[str, list[dict[str, Any]]]] = []
        if not self._dir.is_dir():
            return found
        for lock in self._dir.glob("ckpt-*.lock"):
            process = lock.name[len("ckpt-") : -len(".lock")]
            if process == self.process:
                continue
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue  # its process is alive
            os.close(fd)  # the lock was free: the process is gone (forget() removes it)
            path = self._path(process, "json")
            try:
                entries = orjson.loads(path.read_bytes())
            except FileNotFoundError:
                entries = []
            except orjson.JSONDecodeError:
                # Cannot happen with write-then-rename, unless the disk lied: keep it for a human.
                logger.error("unreadable checkpoint file kept", extra={"file": path.name})
                CHECKPOINT_FAILURES.inc()
                continue
            found.append((process, entries + self._added(process, entries)))
        return found

    def _added(self, process: str, snapshot: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The entries a dead process added after its last snapshot (a torn last line, from a
        crash mid-append, is skipped: its stream's first token had just gone out)."""
        try:
            lines = self._path(process, "new").read_bytes().split(b"\n")
        except FileNotFoundError:
            return []
        known = {entry.get("limits_id") for entry in snapshot}
        added: dict[str, dict[str, Any]] = {}
        for line in lines:
            if not line:
                continue
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(entry, dict) and entry.get("limits_id") not in known:
                added[entry.get("limits_id")] = entry  # a later line of a stream wins
        return list(added.values())

    async def dead(self) -> list[tuple[str, list[dict[str, Any]]]]:
        return await asyncio.get_running_loop().run_in_executor(None, self._dead)

    async def forget(self, process: str) -> None:
        for ext in ("json", "new", "tmp", "lock"):
            self._path(process, ext).unlink(missing_ok=True)

    async def close(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            self._path(self.process, "json").unlink(missing_ok=True)
            self._path(self.process, "new").unlink(missing_ok=True)
            self._path(self.process, "lock").unlink(missing_ok=True)
            os.close(fd)


def make_store() -> CheckpointStore:
    url = getattr(settings, "REDIS_URL", "")
    if url:
        from core.redis_clients import key_prefix

        return RedisStore(url, key_prefix())
    return FileStore(Path(settings.EZAT_CHECKPOINT_DIR))


# --- the process's open streams -----------------------------------------------------------------
class Checkpoints:
    """Open streams of this process, snapshotted by one background task."""

    def __init__(self) -> None:
        # limits id -> (exchange, its tracker, the fixed part of its entry: fixed_part)
        self._open: dict[str, tuple[CommittedExchange, UsageTracker, bytes]] = {}
        self._store: CheckpointStore | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last_written: dict[str, bytes] = {}
        # Streams opened since the last write, and the waiter the writer task sleeps on.
        self._fresh: set[str] = set()
        self._wake: asyncio.Future[None] | None = None

    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # A new event loop (tests run one per test): the old task and client died with theirs.
            self._loop, self._task, self._store, self._wake = loop, None, None, None
        return loop

    @property
    def store(self) -> CheckpointStore:
        self._bind()
        if self._store is None:
            self._store = make_store()
        return self._store

    def open(self, exchange: CommittedExchange, tracker: UsageTracker) -> None:
        """The stream committed: from now on its output is checkpointed, the first time within
        EZAT_CHECKPOINT_FIRST_WRITE_DELAY. O(1), no I/O: the writer task is woken (or started)."""
        lid = exchange.limits_id
        self._open[lid] = (exchange, tracker, fixed_part(exchange))
        self._fresh.add(lid)
        loop = self._bind()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())
        elif self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def close(self, exchange: CommittedExchange) -> None:
        lid = exchange.limits_id
        self._open.pop(lid, None)
        self._fresh.discard(lid)

    def __len__(self) -> int:
        return len(self._open)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        interval = settings.EZAT_CHECKPOINT_INTERVAL
        delay = settings.EZAT_CHECKPOINT_FIRST_WRITE_DELAY
        next_full = loop.time() + interval
        while True:
            if self._fresh:
                # Streams that commit in this window share the write.
                await asyncio.sleep(min(delay, max(0.0, next_full - loop.time())))
            else:
                self._wake = loop.create_future()
                try:
                    async with asyncio.timeout_at(next_full):
                        await self._wake
                except TimeoutError:
                    pass  # the interval is up: a full write
                finally:
                    self._wake = None
            if loop.time() >= next_full:
                await self.flush()
                next_full = loop.time() + interval
            elif self._fresh:
                await self.flush_fresh()
            if not self._open and not self._last_written:
                self._task = None
                return  # idle: restarted by the next stream

    async def flush_fresh(self) -> None:
        """Add the streams opened since the last write (their first checkpoint)."""
        fresh, self._fresh = self._fresh, set()
        entries = {}
        for lid in fresh:
            if (found := self._open.get(lid)) is not None:
                exchange, tracker, fixed = found
                entries[lid] = encode(fixed, tracker, exchange)
        if not entries:
            return
        try:
            await self.store.add(entries)
        except (OSError, RedisError) as exc:  # counted; the next full write has them
            CHECKPOINT_FAILURES.inc()
            logger.warning("checkpoint write failed", extra={"error": repr(exc)})
            return
        CHECKPOINT_WRITES.inc()
        self._last_written.update(entries)

    async def flush(self) -> None:
        """One write of every open stream's snapshot (which renews the heartbeat); nothing when
        there are none and the last write was empty."""
        self._fresh.clear()
        # 1,000 open streams are 1,000 entries a second: only the tokens are encoded anew.
        entries = {
            lid: encode(fixed, tracker, exchange)
            for lid, (exchange, tracker, fixed) in list(self._open.items())
        }
        OPEN_STREAMS.set(len(entries))
        if not entries and not self._last_written:
            return
        try:
            await self.store.write(entries)
        except (OSError, RedisError) as exc:  # counted; the next interval writes again
            CHECKPOINT_FAILURES.inc()
            logger.warning("checkpoint write failed", extra={"error": repr(exc)})
            return
        CHECKPOINT_WRITES.inc()
        self._last_written = entries

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._store is not None:
            await self._store.close()
            self._store = None


checkpoints = Checkpoints()
