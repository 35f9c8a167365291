"""The dashboard's live request feed: the gateway publishes one row per request-log row
(every authenticated request: answered, refused or failed).

Publishing is best effort: a dashboard that misses a row still shows it on the next page load,
while a request that failed because Redis hiccupped would be a real outage. So errors are
logged and counted, never raised, and a slow channel layer cannot hold a request for long.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

from channels.layers import get_channel_layer
from prometheus_client import Counter

from core import money

logger = logging.getLogger(__name__)

PUBLISH_FAILURES = Counter(
    "ezat_live_publish_failures_total", "Live request-feed rows that could not be published"
)
# The gateway awaits publish_request after the usage record; bound the wait so a stuck channel
# layer costs a dashboard row, not the caller's latency.
PUBLISH_TIMEOUT_SECONDS = 0.5
MESSAGE_TYPE = "request.row"  # dispatched to RequestFeedConsumer.request_row
ROWS_MESSAGE_TYPE = "request.rows"  # dispatched to RequestFeedConsumer.request_rows


def group_name(org_id: int) -> str:
    return f"org.{int(org_id)}.requests"


def format_cost_usd(cost_nano: int) -> str:
    """Per-request costs are fractions of a cent: six decimals, as the request log shows them."""
    return money.usd_from_nano(cost_nano, money.COST_PLACES)


# The HTTP status a usage record's status implies (a row built from the record alone).
_HTTP_OF_USAGE_STATUS = {"client_disconnected": 499, "stream_failed": 502}


def build_row(
    *,
    request_id: str,
    created_at: datetime,
    model_id: str,
    model_name: str,
    key_id: int | None,
    key_prefix: str,
    status: str,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int,
    cache_write_tokens: int,
    cost_nano: int,
    output_exact: bool,
    latency_ms: int,
    deployment: str,
    attempts: int,
    requested_model: str = "",
    http_status: int | None = None,
    error_type: str = "",
    error_message: str = "",
    count: int = 1,
) -> dict[str, Any]:
    """The one shape of a request-log row: the page renders it and the websocket sends it."""
    return {
        "request_id": request_id,
        "created_at": created_at.isoformat(),
        "model_id": model_id,
        "model_name": model_name,
        "key_id": key_id,
        "key_prefix": key_prefix,
        "status": status,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_tokens": cache_read_tokens,
        "cache_write_tokens": cache_write_tokens,
        "tokens": input_tokens + output_tokens + cache_read_tokens + cache_write_tokens,
        "cost_usd": format_cost_usd(cost_nano),  # the plain number, for scripts reading the feed
        # Display text from core.money, so a live row reads exactly like a server-rendered one.
        "cost": money.usd_cost(cost_nano),
        "latency": money.duration(latency_ms),
        "output_exact": output_exact,
        "latency_ms": latency_ms,
        "deployment": deployment,
        "attempts": attempts,
        "http_status": http_status
        if http_status is not None
        else _HTTP_OF_USAGE_STATUS.get(status, 200),
        "error_type": error_type,
        "error_message": error_message,
        "count": count,
        # The model asked for, when another one answered (a fallback, or ezat/auto's choice).
        "requested_model": requested_model if requested_model != model_id else "",
    }


def row_from_log(fields: dict[str, Any], *, key_prefix: str) -> dict[str, Any]:
    """The row for a request-log row the gateway just queued (gateway/outcome.py), whatever the
    request's end: answered, refused or failed. No query: everything is in hand, and it reads
    exactly like `request_row` of the stored row (billing/dashboard_selectors.py)."""
    return build_row(
        request_id=fields["request_id"],
        created_at=fields["created_at"],
        model_id=fields["model_id"],
        model_name=fields["model_name"],
        key_id=fields["api_key_id"],
        key_prefix=key_prefix,
        status=fields["status"],
        input_tokens=fields["input_tokens"],
        output_tokens=fields["output_tokens"],
        cache_read_tokens=fields["cache_read_tokens"],
        cache_write_tokens=fields["cache_write_5m_tokens"] + fields["cache_write_1h_tokens"],
        cost_nano=fields["cost_nano"],
        output_exact=fields["output_exact"],
        latency_ms=fields["latency_ms"],
        deployment=fields["deployment"],
        attempts=sum(1 for a in fields["attempts"] if "deployment" in a),
        requested_model=fields["requested_model"],
        http_status=fields["http_status"],
        error_type=fields["error_type"],
        error_message=fields["error_message"],
        count=fields["count"],
    )


async def publish_request(org_id: int, row: dict[str, Any]) -> None:
    """Send `row` to every dashboard tab watching the org's request log. Never raises."""
    await _group_send(org_id, {"type": MESSAGE_TYPE, "row": row})


async def publish_rows(org_id: int, rows: list[dict[str, Any]]) -> None:
    """Send several rows in one channel-layer message. Never raises."""
    await _group_send(org_id, {"type": ROWS_MESSAGE_TYPE, "rows": rows})


async def _group_send(org_id: int, message: dict[str, Any]) -> None:
    try:
        layer = get_channel_layer()
        if layer is None:
            return
        async with asyncio.timeout(PUBLISH_TIMEOUT_SECONDS):
            await layer.group_send(group_name(org_id), message)
    except Exception:  # best effort by design (see module docstring); counted and logged
        PUBLISH_FAILURES.inc()
        logger.warning("live request feed: publish failed", exc_info=True, extra={"org_id": org_id})


class LiveFeed:
    """Coalesces rows per org and publishes them every EZAT_LIVE_FEED_FLUSH_SECONDS (1 s).

    With the Redis channel layer a group_send costs round trips and CPU (channels_redis: a Lua
    script and several commands); one per request would be a measurable share of the gateway's
    per-request budget. At 0.25 s it was still ~6 % of the gateway's CPU at one request at a
    time (issue 22's profile: a handful of rows per flush); once a second a row shows up on a
    watching dashboard at most a second after its request ended.
    """

    MAX_ROWS_PER_FLUSH = 200  # per org: a page shows 50; older rows come with the next reload

    def __init__(self) -> None:
        self._rows: dict[int, list[dict[str, Any]]] = {}
        self._flusher: asyncio.Task[None] | None = None

    def publish(self, org_id: int, row: dict[str, Any]) -> None:
        rows = self._rows.setdefault(org_id, [])
        rows.append(row)
        if len(rows) > self.MAX_ROWS_PER_FLUSH:
            del rows[0]
            PUBLISH_FAILURES.inc()
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        from django.conf import settings

        await asyncio.sleep(settings.EZAT_LIVE_FEED_FLUSH_SECONDS)
        batches, self._rows = self._rows, {}
        for org_id, rows in batches.items():
            await publish_rows(org_id, rows)


feed = LiveFeed()
