"""Breakpoint-aware fallback: where a conversation's cached prefix most likely is, when its own
deployment is cooling down.

Rendezvous hashing sends a displaced conversation to its second choice, which holds nothing of
it. Two things can do better, and this module remembers both, per model:

- the deployment that last answered this *session* (after a first fallback, the conversation's
  whole history is cached there);
- the deployments that recently answered requests with the same *shared prefix* -- the tools
  and system prompt, which every conversation of one app repeats -- so a displaced conversation
  at least reads the app's prompt instead of writing it again.

`prefer` puts the best holder first: the session's deployment, else the one that served the
prefix most recently, else the rendezvous order unchanged. Recency is compared, never measured
against a TTL: the gateway cannot see the provider's cache, and "most recent" is the best bet
whatever the time scale.

Cost on the hot path: `record` is two dictionary updates per successful request, in process
(bounded LRU maps). With `REDIS_URL`, what was recorded is written to Redis in the background,
at most once a second per process, as one script call (one command, one round trip): never on a
request's path.
Redis is *read* only in the fallback case (one MGET), so replicas learn from each other's
traffic exactly when it matters. Redis keys expire after an hour (the longest cache TTL).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from django.conf import settings

from catalog.snapshot import Route
from core.redis_clients import key_prefix as installation
from gateway.metrics import PREFIX_FALLBACKS, SIDE_EFFECT_FAILURES

logger = logging.getLogger(__name__)

MAX_SESSIONS = 20_000
MAX_PREFIXES = 5_000
MAX_DIRTY = 10_000
FLUSH_INTERVAL = 1.0
REDIS_TTL = 3600
READ_TIMEOUT = 0.2


def key_prefix() -> str:
    """The installation's prefix (EZAT_REDIS_PREFIX), then one hash tag for every key: a flush
    (one script) and a read (one MGET) name many sessions' and prefixes' keys, which Redis
    Cluster serves only from one slot."""
    return f"{installation()}{{route}}:"


# KEYS[i] = ARGV[i], expiring after ARGV[#KEYS + 1] seconds: a whole flush in one command.
FLUSH_SCRIPT = """
local ttl = tonumber(ARGV[#KEYS + 1])
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[i], 'EX', ttl)
end
return #KEYS
"""

# (model id, session key) and (model id, prefix identity): what the maps are keyed by.
Key = tuple[str, str]


def prefix_identity(body: dict[str, Any]) -> str | None:
    """What identifies a request's shared prefix (tools, then system), cheaply: a hash of the tool
    names and of the system text's length, first 2 KiB and last 1 KiB (a few microseconds for a
    40k-token prompt; hashing all of it costs ~0.1 ms). Two apps agreeing on all of that share a
    guess, never a correctness issue. None when the request has neither tools nor system."""
    tools = body.get("tools")
    system = body.get("system")
    if not tools and not system:
        return None
    # Validation refuses a `tools` that is not an array before this runs; still, an identity is
    # a routing hint, so a body of another shape is read as having no tools, never an error.
    listed = tools if isinstance(tools, list) else ()
    names = "\x1f".join(str(t.get("name", "")) for t in listed if isinstance(t, dict))
    if isinstance(system, list):
        texts = [b.get("text") for b in system if isinstance(b, dict)]
        text = "\x1e".join(t for t in texts if isinstance(t, str))
    else:
        text = system if isinstance(system, str) else ""
    tail = text[-1024:] if len(text) > 3072 else ""
    identity = f"{names}\x1d{len(text)}\x1d{text[:2048]}\x1d{tail}"
    return hashlib.blake2b(identity.encode(), digest_size=16).hexdigest()


def _hex(kind: str, key: Key) -> str:
    digest = hashlib.blake2b(f"{kind}|{key[0]}|{key[1]}".encode(), digest_size=16)
    return digest.hexdigest()


class PrefixDigest:
    def __init__(self) -> None:
        self._sessions: OrderedDict[Key, tuple[int, float]] = OrderedDict()
        self._prefixes: OrderedDict[Key, dict[int, float]] = OrderedDict()
        self._dirty: dict[str, str] = {}
        self._flushed_at = 0.0
        self._flush_task: asyncio.Task[None] | None = None
        self._redis: Any = None
        self._flush_script: Any = None

    # --- writes (every successful request) ---------------------------------------------------
    def record(self, model_id: str, session: str, prefix: str | None, deployment_id: int) -> None:
        now = time.time()
        skey = (model_id, session)
        self._sessions[skey] = (deployment_id, now)
        self._sessions.move_to_end(skey)
        if len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        if prefix is not None:
            pkey = (model_id, prefix)
            holders = self._prefixes.get(pkey)
            if holders is None:
                holders = self._prefixes[pkey] = {}
                if len(self._prefixes) > MAX_PREFIXES:
                    self._prefixes.popitem(last=False)
            else:
                self._prefixes.move_to_end(pkey)
            holders[deployment_id] = now
        if settings.REDIS_URL:
            self._mark_dirty(skey, prefix, deployment_id, now)

    def _mark_dirty(self, skey: Key, prefix: str | None, deployment_id: int, now: float) -> None:
        if len(self._dirty) < MAX_DIRTY:
            start = key_prefix()
            self._dirty[start + "s:" + _hex("s", skey)] = f"{deployment_id}:{now:.3f}"
            if prefix is not None:
                name = f"{start}p:{_hex('p', (skey[0], prefix))}:{deployment_id}"
                self._dirty[name] = f"{now:.3f}"
        else:  # Redis is behind (or down): the local view still works; others learn less
            SIDE_EFFECT_FAILURES.labels("prefix_digest_backlog").inc()
        if time.monotonic() - self._flushed_at < FLUSH_INTERVAL:
            return
        if self._flush_task is not None and not self._flush_task.done():
            return
        self._flushed_at = time.monotonic()
        self._flush_task = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        batch, self._dirty = self._dirty, {}
        try:
            if self._flush_script is None:
                self._flush_script = self._redis_client().register_script(FLUSH_SCRIPT)
            await self._flush_script(keys=list(batch), args=[*batch.values(), REDIS_TTL])
        except Exception:  # best effort: the local digest is unaffected; retried with new data
            SIDE_EFFECT_FAILURES.labels("prefix_digest_flush").inc()
            logger.warning("prefix digest flush failed", exc_info=True)

    def _redis_client(self) -> Any:
        if self._redis is None:
            from core.redis_clients import async_client

            self._redis = async_client(
                settings.REDIS_URL, socket_timeout=READ_TIMEOUT, socket_connect_timeout=0.5
            )
        return self._redis

    # --- reads (only when a conversation's deployment is cooling) ---------------------------
    async def prefer(
        self, ranked: Sequence[Route], model_id: str, session: str, prefix: str | None
    ) -> list[Route]:
        """`ranked` (healthy routes, rendezvous order) with the likeliest cache holder first."""
        order = list(ranked)
        if len(order) < 2:
            return order
        ids = [r.deployment.id for r in order]
        skey = (model_id, session)
        last = self._sessions.get(skey)
        session_at = {last[0]: last[1]} if last is not None else {}
        holders = dict(self._prefixes.get((model_id, prefix), {})) if prefix is not None else {}
        if settings.REDIS_URL:
            await self._merge_shared(skey, prefix, ids, session_at, holders)
        chosen, reason = _choose(ids, session_at, holders)
        PREFIX_FALLBACKS.labels(reason).inc()
        if chosen is None or chosen == ids[0]:
            return order
        index = ids.index(chosen)
        return [order[index], *order[:index], *order[index + 1 :]]

    async def _merge_shared(
        self,
        skey: Key,
        prefix: str | None,
        ids: list[int],
        session_at: dict[int, float],
        holders: dict[int, float],
    ) -> None:
        start = key_prefix()
        names = [start + "s:" + _hex("s", skey)]
        if prefix is not None:
            phex = _hex("p", (skey[0], prefix))
            names += [f"{start}p:{phex}:{d}" for d in ids]
        try:
            values = await asyncio.wait_for(self._redis_client().mget(names), READ_TIMEOUT)
        except Exception:  # the local view decides alone; counted
            SIDE_EFFECT_FAILURES.labels("prefix_digest_read").inc()
            logger.debug("prefix digest read failed", exc_info=True)
            return
        try:
            if values[0] is not None:
                dep, at = values[0].decode().split(":", 1)
                # Another process served this session more recently than this one did.
                if float(at) > max(session_at.values(), default=0.0):
                    session_at.clear()
                    session_at[int(dep)] = float(at)
            for dep, value in zip(ids, values[1:], strict=False):
                if value is not None:
                    holders[dep] = max(holders.get(dep, 0.0), float(value))
        except (ValueError, UnicodeDecodeError):  # a foreign value under our prefix: ignored
            SIDE_EFFECT_FAILURES.labels("prefix_digest_value").inc()

    def reset(self) -> None:
        self._sessions.clear()
        self._prefixes.clear()
        self._dirty.clear()
        self._flushed_at = 0.0


def _choose(
    ids: list[int], session_at: dict[int, float], holders: dict[int, float]
) -> tuple[int | None, str]:
    for dep in session_at:
        if dep in ids:
            return dep, "session"
    candidates = [(at, -ids.index(dep), dep) for dep, at in holders.items() if dep in ids]
    if candidates:
        return max(candidates)[2], "prefix"
    return None, "none"


digest = PrefixDigest()
