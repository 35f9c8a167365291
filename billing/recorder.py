"""Writing usage records from the gateway's hot path.

The cost is computed here, once, from the prices the request was admitted with, and stored with
those prices, so a later price change never rewrites history. The gateway awaits this before it
sends `[DONE]` / `message_stop`: a client that saw the end of a stream has been recorded.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.db import IntegrityError, close_old_connections, transaction
from prometheus_client import Counter

from billing.pricing import Prices, TokenCounts, cost_nano

logger = logging.getLogger(__name__)

DUPLICATE_REQUEST_IDS = Counter(
    "ezat_usage_duplicate_request_ids_total",
    "Caller-supplied request ids reused; the record was stored under a suffixed id.",
)


@dataclass(slots=True)
class UsageData:
    request_id: str
    org_id: int
    key_id: int | None
    api: str
    stream: bool
    model_id: str
    model_name: str
    deployment: str
    tokens: TokenCounts
    prices: Prices
    started_at: datetime
    output_exact: bool = True
    status: str = "ok"
    attempts: list[dict[str, Any]] = field(default_factory=list)
    latency_ms: int = 0
    ttft_ms: int | None = None

    @property
    def cost_nano(self) -> int:
        return cost_nano(self.tokens, self.prices)


def _fields(data: UsageData, cost: int) -> dict[str, Any]:
    return {
        "request_id": data.request_id,
        "org_id": data.org_id,
        "api_key_id": data.key_id,
        "api": data.api,
        "stream": data.stream,
        "model_id": data.model_id,
        "model_name": data.model_name[:128],
        "deployment": data.deployment,
        "input_tokens": data.tokens.input,
        "output_tokens": data.tokens.output,
        "cache_read_tokens": data.tokens.cache_read,
        "cache_write_5m_tokens": data.tokens.cache_write_5m,
        "cache_write_1h_tokens": data.tokens.cache_write_1h,
        "reasoning_tokens": data.tokens.reasoning,
        "cost_nano": cost,
        "prices": data.prices.as_usd_strings(),
        "output_exact": data.output_exact,
        "status": data.status,
        "attempts": data.attempts,
        "latency_ms": data.latency_ms,
        "ttft_ms": data.ttft_ms,
        "started_at": data.started_at,
    }


def _insert_one(fields: dict[str, Any]) -> None:
    from billing.models import UsageRecord

    try:
        with transaction.atomic():
            UsageRecord.objects.create(**fields)
    except IntegrityError:
        # Only a caller reusing its own x-request-id gets here: both requests really ran, so
        # both are billed; the second is stored under a suffixed id rather than lost.
        DUPLICATE_REQUEST_IDS.inc()
        fields["request_id"] = f"{fields['request_id']}~{uuid.uuid4().hex[:8]}"
        UsageRecord.objects.create(**fields)


def _insert_batch(batch: list[dict[str, Any]]) -> None:
    """One transaction for the whole batch; row by row only if a request id collides."""
    from billing.models import UsageRecord

    close_old_connections()
    try:
        with transaction.atomic():
            UsageRecord.objects.bulk_create([UsageRecord(**fields) for fields in batch])
    except IntegrityError:
        for fields in batch:
            _insert_one(fields)


class UsageWriter:
    """Group commit: records that arrive while a write is in flight go together in the next one.

    Every caller still awaits its own record's commit (so `[DONE]` means "recorded"), but under
    load N requests share one thread hop and one transaction instead of N of each.
    """

    def __init__(self, max_batch: int = 500) -> None:
        self._pending: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._max_batch = max_batch

    async def write(self, fields: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._pending.append((fields, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        await asyncio.shield(future)

    async def _flush(self) -> None:
        while self._pending:
            batch = self._pending[: self._max_batch]
            del self._pending[: self._max_batch]
            try:
                await sync_to_async(_insert_batch, thread_sensitive=False)([f for f, _ in batch])
            except Exception as exc:  # handed to every waiting request, which reports it
                logger.exception("usage batch insert failed", extra={"records": len(batch)})
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for _, future in batch:
                if not future.done():
                    future.set_result(None)


writer = UsageWriter()


async def record_usage(data: UsageData) -> int:
    """Insert the record (group-committed); returns its cost in nano-USD."""
    cost = data.cost_nano
    await writer.write(_fields(data, cost))
    return cost
