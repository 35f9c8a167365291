"""Signed thinking blocks kept server-side for OpenAI-format tool loops.

Anthropic requires an assistant turn's signed thinking blocks to come back with its tool results;
OpenAI clients never see them. We keep them keyed by (org, tool call id) for a bounded time —
in Redis when configured (any process can serve the next turn), else in process memory — and
put them back when the tool results arrive. Scoped per org so one tenant can never inject
another's blocks by guessing a tool call id.

Each entry also names the model that produced the blocks: thinking is bound to its model, so a
conversation whose last tool turn was answered by a fallback continues on that model.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
from django.conf import settings

from core.redis_clients import key_prefix
from gateway.expiring_lru import ExpiringLru
from gateway.metrics import SIDE_EFFECT_FAILURES

logger = logging.getLogger(__name__)

MAX_LOCAL_ENTRIES = 20_000


class ThinkingStore:
    def __init__(self) -> None:
        self._local: ExpiringLru[bytes] = ExpiringLru(MAX_LOCAL_ENTRIES)
        self._redis: Any = None

    def _client(self) -> Any:
        if self._redis is None and settings.REDIS_URL:
            from core.redis_clients import async_client

            self._redis = async_client(
                settings.REDIS_URL, socket_timeout=0.5, socket_connect_timeout=0.5
            )
        return self._redis

    @staticmethod
    def _key(org_id: int, tool_id: str) -> str:
        # Tagged by org: one lookup's MGET names one org's tool calls, one slot in a cluster.
        return f"{key_prefix()}thinking:{{{org_id}}}:{tool_id}"

    async def put(
        self,
        org_id: int,
        blocks_by_tool_id: dict[str, list[dict[str, Any]]],
        model_id: str = "",
    ) -> None:
        if not blocks_by_tool_id:
            return
        ttl = settings.EZAT_THINKING_TTL_SECONDS
        items = {
            self._key(org_id, t): orjson.dumps({"model": model_id, "blocks": b})
            for t, b in blocks_by_tool_id.items()
        }
        client = self._client()
        if client is not None:
            try:
                async with client.pipeline(transaction=False) as pipe:
                    for key, value in items.items():
                        pipe.set(key, value, ex=ttl)
                    await pipe.execute()
                return
            except Exception:  # degrade to this process's memory; counted
                SIDE_EFFECT_FAILURES.labels("thinking_store_put").inc()
                logger.warning("thinking store: redis put failed", exc_info=True)
        expires = time.monotonic() + ttl
        for key, value in items.items():
            self._local.put(key, value, expires)

    async def get_many(
        self, org_id: int, tool_ids: Iterable[str]
    ) -> dict[str, list[dict[str, Any]]]:
        return (await self.lookup(org_id, tool_ids)).blocks

    async def lookup(self, org_id: int, tool_ids: Iterable[str]) -> StoredThinking:
        """The blocks of these tool calls, and the models that produced them."""
        ids = list(dict.fromkeys(tool_ids))
        found = StoredThinking()
        if not ids:
            return found
        keys = [self._key(org_id, t) for t in ids]
        client = self._client()
        if client is not None:
            try:
                values = await client.mget(keys)
                for tool_id, value in zip(ids, values, strict=True):
                    if value is not None:
                        found.add(tool_id, orjson.loads(value))
            except Exception:  # missing blocks only turn thinking off for this request
                SIDE_EFFECT_FAILURES.labels("thinking_store_get").inc()
                logger.warning("thinking store: redis get failed", exc_info=True)
        now = time.monotonic()
        for tool_id, key in zip(ids, keys, strict=True):
            hit = self._local.get(key, now)
            if tool_id not in found.blocks and hit is not None:
                found.add(tool_id, orjson.loads(hit))
        return found


@dataclass(slots=True)
class StoredThinking:
    blocks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    models: set[str] = field(default_factory=set)  # the models that produced them, when known

    def add(self, tool_id: str, value: Any) -> None:
        if isinstance(value, dict):
            self.blocks[tool_id] = value.get("blocks") or []
            if value.get("model"):
                self.models.add(value["model"])
        else:  # written before entries named their model: the blocks alone
            self.blocks[tool_id] = value


store = ThinkingStore()
