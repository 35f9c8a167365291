"""Settle a stored batch of group-committed requests at once (EZAT_USAGE_COMMIT=group).

The usage log's flusher (billing/usage_log.py) stores a batch of rows, then settles each of their
requests: the hold each request shrank to its cost (`Limiter.hold_unflushed`) is released and the
cost charged. One settle per request would be one limiter round trip per request on top of the
request path's own; here a batch is one Redis script call (SETTLE_BATCH, up to `CHUNK` requests
each), and the in-process limiter loops over its own `settle`.

The money rules are settlement.settle's, applied request by request in the batch's order
(SETTLE_BATCH runs the same Lua `settle_one` as scripts.SETTLE): `charged` only counts rows the
flusher has stored (it calls this after the INSERT), and a request settled before (its settled
marker is live) is a no-op, so a batch replayed after a crash charges nothing twice.

No leases here: the request path released them already (`hold_unflushed`), and a replay runs in
another process, which never held them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

from gateway.limits import scripts, settlement
from gateway.limits.base import Limiter
from gateway.limits.periods import month_ttl_seconds
from gateway.limits.resp import ScriptRef

# Requests per script call: bounds one script's run time (6 keys each), as _BEAT_BATCH does.
CHUNK = 200
_KEYS_PER_REQUEST = 6

# KEYS: per request, its org, hexp, hold, and its key's month, day and total states
# (scripts.SETTLE's first six). ARGV: marker ms, month kmon ttl s, now ms ("" = TIME), then per
# request its id and cost. Returns how many requests were settled (the others had settled).
SETTLE_BATCH = (
    scripts._PRELUDE
    + scripts._SETTLE_ONE
    + """
local marker_ms, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = clock(ARGV[3])
local settled = 0
for i = 0, (#ARGV - 3) / 2 - 1 do
  local k = i * 6
  settled = settled + settle_one(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4],
    KEYS[k + 5], KEYS[k + 6], ARGV[4 + 2 * i], ARGV[5 + 2 * i], marker_ms, ttl, now)
end
return settled
"""
)
_SETTLE_BATCH_REF = ScriptRef(hashlib.sha1(SETTLE_BATCH.encode()).hexdigest(), SETTLE_BATCH)


class Settled(NamedTuple):
    """One stored request to settle: its limits id, key, org and cost (nano-USD)."""

    request_id: str
    key_id: int
    org_id: int
    cost_nano: int


async def settle_batch(limiter: Limiter, batch: Sequence[Settled]) -> None:
    """Release each request's hold and charge its cost; a request settled already is skipped.
    Free requests (cost 0) are left out: their settle on the request path did everything."""
    due = [item for item in batch if item.cost_nano > 0]
    if not due:
        return
    from gateway.limits.redis import RedisLimiter

    if isinstance(limiter, RedisLimiter):
        for start in range(0, len(due), CHUNK):
            await _settle_redis(limiter, due[start : start + CHUNK])
        return
    for item in due:
        await limiter.settle(
            item.request_id,
            key_id=item.key_id,
            org_id=item.org_id,
            hold_nano=item.cost_nano,
            cost_nano=item.cost_nano,
        )


async def _settle_redis(limiter: object, chunk: Sequence[Settled]) -> None:
    from gateway.limits.common import ERRORS
    from gateway.limits.redis import UNREACHABLE, RedisLimiter

    assert isinstance(limiter, RedisLimiter)
    wall = limiter._wall()
    month, day, total = settlement.settle_periods(wall)
    keys: list[str] = []
    args: list[str | int] = [
        int(settlement.SETTLED_MARKER_SECONDS * 1000),
        month_ttl_seconds(month, wall),
        limiter._now_arg(),
    ]
    for item in chunk:
        keys += limiter._org_keys(item.org_id)
        keys += (limiter._kmon_key(item.key_id, period) for period in (month, day, total))
        args += (item.request_id, item.cost_nano)
    assert len(keys) == _KEYS_PER_REQUEST * len(chunk)
    try:
        conn = limiter._redis()
        if conn.fast is not None:
            await conn.fast.evalsha(_SETTLE_BATCH_REF, keys, args)
        else:
            await conn.client.register_script(SETTLE_BATCH)(keys=keys, args=args)
    except UNREACHABLE as exc:
        # The holds stay until their TTL (conservative: the spend still counts as held); the
        # rows are in the database, so the next seed or reseed counts their cost.
        limiter._trip("settle_batch", exc)
        ERRORS.labels("settle_batch").inc()
