"""Writing usage records from the gateway's hot path.

The cost is computed here, once, from the prices the request was admitted with, and stored with
those prices, so a later price change never rewrites history. The gateway awaits this before it
sends `[DONE]` / `message_stop`: a client that saw the end of a stream has been recorded.
"""

from __future__ import annotations

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


def _insert(data: UsageData, cost: int) -> str:
    from billing.models import UsageRecord

    close_old_connections()
    fields = {
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
    request_id = data.request_id
    try:
        with transaction.atomic():
            UsageRecord.objects.create(request_id=request_id, **fields)
    except IntegrityError:
        # Only a caller reusing its own x-request-id gets here: both requests really ran, so
        # both are billed; the second is stored under a suffixed id rather than lost.
        DUPLICATE_REQUEST_IDS.inc()
        request_id = f"{request_id}~{uuid.uuid4().hex[:8]}"
        UsageRecord.objects.create(request_id=request_id, **fields)
    return request_id


async def record_usage(data: UsageData) -> int:
    """Insert the record; returns its cost in nano-USD."""
    cost = data.cost_nano
    await sync_to_async(_insert, thread_sensitive=False)(data, cost)
    return cost
