"""Which platform signed a thinking block: so a conversation carrying it stays on that platform.

Thinking blocks are signed by the platform that produced them (Anthropic's API, Bedrock, Vertex)
and a platform refuses another's signatures. A client sends the blocks back on its next turn
(Messages API) or the gateway does (Chat Completions' thinking store, the Responses API's sealed
reasoning); either way the upstream body carries the signatures. This store remembers, for a
bounded time, the kind of deployment each signature came from (by a digest of it, per org), and
the walk (gateway/walk.py) keeps such a conversation on deployments of that kind.

Only models whose deployments span more than one kind are tracked: with one platform there is
nothing to choose, and nothing is written. A signature the store does not know (expired, written
before this existed) falls back to the kind of the conversation's own deployment.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Iterable
from typing import Any

from django.conf import settings

from catalog.snapshot import ModelInfo
from core.redis_clients import key_prefix
from gateway.expiring_lru import ExpiringLru
from gateway.metrics import SIDE_EFFECT_FAILURES

logger = logging.getLogger(__name__)

MAX_LOCAL_ENTRIES = 20_000


def spans_kinds(model: ModelInfo) -> bool:
    routes = model.routes
    return bool(routes) and any(r.deployment.kind != routes[0].deployment.kind for r in routes)


def signatures_in(body: dict[str, Any]) -> list[str]:
    """The signatures of the thinking blocks in a Messages body, newest turn first."""
    found: list[str] = []
    for message in reversed(body.get("messages") or []):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, dict) and block.get("type") == "thinking":
                signature = block.get("signature")
                if isinstance(signature, str) and signature:
                    found.append(signature)
    return found


def signatures_in_reply(content: Iterable[Any]) -> list[str]:
    return [
        b["signature"]
        for b in content
        if isinstance(b, dict) and b.get("type") == "thinking" and b.get("signature")
    ]


class SignedKinds:
    def __init__(self) -> None:
        self._local: ExpiringLru[str] = ExpiringLru(MAX_LOCAL_ENTRIES)
        self._redis: Any = None
        self._tasks: set[asyncio.Task[None]] = set()

    def _client(self) -> Any:
        if self._redis is None and settings.REDIS_URL:
            from core.redis_clients import async_client

            self._redis = async_client(
                settings.REDIS_URL, socket_timeout=0.5, socket_connect_timeout=0.5
            )
        return self._redis

    @staticmethod
    def _key(org_id: int, signature: str) -> str:
        digest = hashlib.blake2b(signature.encode(), digest_size=16).hexdigest()
        # Tagged by org: one lookup's MGET names one org's signatures, one slot in a cluster.
        return f"{key_prefix()}sigkind:{{{org_id}}}:{digest}"

    def remember(self, org_id: int, signatures: Iterable[str], kind: str) -> None:
        """Off the request path: written in the background (a failure is counted)."""
        keys = [self._key(org_id, s) for s in signatures]
        if not keys:
            return
        expires = time.monotonic() + settings.EZAT_THINKING_TTL_SECONDS
        for key in keys:
            self._local.put(key, kind, expires)
        if self._client() is not None:
            task = asyncio.get_running_loop().create_task(self._publish(keys, kind))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _publish(self, keys: list[str], kind: str) -> None:
        try:
            async with self._client().pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.set(key, kind, ex=int(settings.EZAT_THINKING_TTL_SECONDS))
                await pipe.execute()
        except Exception:  # this process still knows; others fall back to the session's kind
            SIDE_EFFECT_FAILURES.labels("signed_kind_put").inc()
            logger.warning("signed kinds: redis put failed", exc_info=True)

    async def lookup(self, org_id: int, signatures: list[str]) -> str | None:
        """The kind that signed the newest of these signatures it knows, or None."""
        keys = [self._key(org_id, s) for s in signatures[:16]]
        if not keys:
            return None
        now = time.monotonic()
        for key in keys:
            hit = self._local.get(key, now)
            if hit is not None:
                return hit
        client = self._client()
        if client is None:
            return None
        try:
            values = await client.mget(keys)
        except Exception:  # routing falls back to the session's deployment kind; counted
            SIDE_EFFECT_FAILURES.labels("signed_kind_get").inc()
            logger.warning("signed kinds: redis get failed", exc_info=True)
            return None
        for value in values:
            if value is not None:
                return value.decode() if isinstance(value, bytes) else str(value)
        return None


kinds = SignedKinds()
