"""The gateway's durability loop: replays the usage spool and sweeps dead processes' streams.

It runs in every gateway process, at start and then every EZAT_USAGE_SPOOL_RETRY_SECONDS:

0. Usage records held in memory because neither the database nor the spool took them
   (billing/spool.py) are handed to the database, else the spool.
1. This process's spool file, if a failure opened one, is closed (its lock released) so the
   replay can take it; the next failure opens a new one.
2. Every spool file no live process holds (this one's, or a crashed process's on this host) is
   replayed into the database and deleted (billing/spool.py). While the database is still down
   the files stay and the next round tries again.
3. The checkpoints of dead processes (gateway/checkpoints.py: heartbeat expired in Redis, or
   lock free on disk) are billed as estimated usage: the tokens of the last checkpoint, at the
   prices the request was admitted with, `output_exact=False` and an attempt entry saying the
   gateway was lost. The record goes through the same writer as any other (so it is spooled if
   the database is down) and is idempotent by request id, org and start time: a stream that was
   recorded before its process died is not billed twice. The request's hold is then settled at
   that cost and its capacity slot freed, instead of waiting for the hold's TTL.

Delivered output is never free: a stream killed with its process is billed for what its last
checkpoint saw (at most EZAT_CHECKPOINT_INTERVAL behind what went out).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import InterfaceError, OperationalError
from prometheus_client import Counter
from redis.exceptions import RedisError

from billing import spool as spool_mod
from billing.recorder import UsageData, record_usage, writer
from billing.usage_log import usage_log
from catalog.pricing import TokenCounts
from gateway import limits
from gateway.checkpoints import checkpoints, schedule_from_json
from gateway.limits.batch import Settled, settle_batch
from gateway.metrics import SIDE_EFFECT_FAILURES

logger = logging.getLogger(__name__)

SWEPT = Counter(
    "ezat_checkpoints_billed_total",
    "Streams of dead gateway processes billed from their last checkpoint (estimated)",
)

LOST_OUTCOME = "gateway_lost"


def usage_from_checkpoint(entry: dict[str, Any]) -> UsageData:
    started_at = datetime.fromisoformat(entry["started_at"])
    latency_ms = max(0, round((float(entry["updated_at"]) - started_at.timestamp()) * 1000))
    return UsageData(
        request_id=entry["request_id"],
        org_id=int(entry["org_id"]),
        key_id=entry["key_id"],
        api=entry["api"],
        stream=bool(entry["stream"]),
        model_id=entry["model_id"],
        model_name=entry["model_name"],
        requested_model=entry["requested_model"],
        deployment=entry["deployment"],
        tokens=TokenCounts(**entry["tokens"]),
        pricing=schedule_from_json(entry["pricing"]),
        started_at=started_at,
        output_exact=False,  # the last checkpoint's count, not the upstream's final one
        status="ok",
        attempts=[*entry.get("attempts", []), {"outcome": LOST_OUTCOME, "billed": "checkpoint"}],
        latency_ms=latency_ms,
        ttft_ms=entry.get("ttft_ms"),
    )


async def sweep_checkpoints() -> int:
    """Bill every dead process's open streams; returns how many were billed."""
    billed = 0
    for process, entries in await checkpoints.store.dead():
        for entry in entries:
            data = usage_from_checkpoint(entry)
            cost = await record_usage(data)  # the database, or the spool: durable either way
            await limits.get_limiter().settle(
                entry["limits_id"],
                key_id=data.key_id or 0,
                org_id=data.org_id,
                hold_nano=int(entry["hold_nano"]),
                cost_nano=cost,
                deployment_id=entry.get("slot"),
            )
            billed += 1
            SWEPT.inc()
        await checkpoints.store.forget(process)
        logger.warning(
            "billed a dead gateway process's open streams",
            # Not "process": a LogRecord attribute (the KeyError lost the round's other work).
            extra={"dead_process": process, "streams": len(entries)},
        )
    return billed


async def settle_logged(settles: list[dict[str, Any]]) -> None:
    """Settle the requests of group-committed usage rows now in the database (the usage log's
    flusher, and the replay of a dead process's log): the hold their request shrank to the
    cost is released and the cost charged, the whole batch in one limiter round trip
    (gateway/limits/batch.py). Idempotent by limits id (the settled marker): a request the
    flusher settled before its process died is not charged again by the replay."""
    await settle_batch(
        limits.get_limiter(),
        [
            Settled(
                s["limits_id"], int(s.get("key_id") or 0), int(s["org_id"]), int(s["cost_nano"])
            )
            for s in settles
        ],
    )


async def close_usage_log(seconds: float) -> None:
    """Store what the group-commit log holds before the process exits (bounded: a dead
    database must not hang the exit), then release its files: what is left is replayed by the
    next start, or by another live process on this host."""
    try:
        async with asyncio.timeout(seconds):
            await usage_log.wait_flushed()
    except TimeoutError:
        logger.warning(
            "usage log: %d records not stored at shutdown; the next start replays them",
            usage_log.unflushed,
        )
    await usage_log.stop()
    await asyncio.get_running_loop().run_in_executor(None, usage_log.close)


def _replay_spool() -> spool_mod.ReplayResult:
    from django.db import close_old_connections, connection

    close_old_connections()
    try:
        return spool_mod.replay()
    except (OperationalError, InterfaceError):
        connection.close()  # a fresh connection next round
        raise


async def run_once() -> tuple[spool_mod.ReplayResult | None, int]:
    """One round: rotate and replay the spool, then sweep checkpoints."""
    result: spool_mod.ReplayResult | None = None
    if writer.held:
        # Records neither store took (billing/spool.py): the database, else the spool, now.
        await writer.retry_held()
    if spool_mod.spool.current is not None:
        await spool_mod.spool.rotate()
    try:
        result = await sync_to_async(_replay_spool, thread_sensitive=False)()
        if result.replayed or result.torn:
            logger.warning(
                "usage spool replayed",
                extra={"records": result.replayed, "torn": result.torn, "files": result.files},
            )
        if result.settles:
            await settle_logged(result.settles)
    except (OperationalError, InterfaceError) as exc:
        SIDE_EFFECT_FAILURES.labels("spool_replay").inc()
        logger.warning("usage spool replay deferred: database unavailable (%s)", exc)
    billed = 0
    try:
        billed = await sweep_checkpoints()
    except (OSError, RedisError) as exc:
        SIDE_EFFECT_FAILURES.labels("checkpoint_sweep").inc()
        logger.warning("checkpoint sweep deferred (%s)", exc)
    return result, billed


async def run_forever() -> None:
    """At start, then every EZAT_USAGE_SPOOL_RETRY_SECONDS, until cancelled."""
    interval = settings.EZAT_USAGE_SPOOL_RETRY_SECONDS
    while True:
        started = time.monotonic()
        try:
            await run_once()
        except Exception:  # a bug must not end the loop: counted, logged, retried
            SIDE_EFFECT_FAILURES.labels("durability_loop").inc()
            logger.exception("durability round failed")
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
