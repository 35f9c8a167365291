"""Liveness, readiness and Prometheus metrics.

`/readyz` is unauthenticated and probed by load balancers, so a flood of it must cost neither a
database session nor a Redis connection per request. Its answer is cached for
EZAT_READYZ_CACHE_SECONDS and computed by one probe at a time (single-flight): requests arriving
while a probe runs wait for it and share its result. The probe runs on one dedicated thread that
keeps its database connection (and one Redis client) across probes, so probing opens no new
connection either, only re-establishes one after a failure.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, Counter, generate_latest

logger = logging.getLogger(__name__)

# A probe that has not answered by then counts as a failure (the database is not "ready" if a
# SELECT 1 takes this long); the stuck probe finishes on its thread and the next one queues.
PROBE_TIMEOUT_SECONDS = 5.0

READYZ_PROBES = Counter("ezat_readyz_probes_total", "Readiness probes actually run (not cached).")


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


class _ProbeThread:
    """The probe's thread and what it keeps between probes (its DB connection is Django's
    per-thread connection of that thread; the Redis client is created once)."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ezat-readyz")
        self._redis: Any = None

    def run(self) -> dict[str, str]:
        try:
            return self._executor.submit(self._probe).result(timeout=PROBE_TIMEOUT_SECONDS)
        except FutureTimeout:
            logger.warning("readyz: probe timed out")
            return {"database": "timeout"}

    def _probe(self) -> dict[str, str]:
        READYZ_PROBES.inc()
        checks = {"database": self._database()}
        if settings.REDIS_URL:
            checks["redis"] = self._ping_redis()
        return checks

    @staticmethod
    def _database() -> str:
        try:
            # Health-checked reuse: a dead connection is replaced here, a live one reused.
            connection.close_if_unusable_or_obsolete()
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            return "ok"
        except DatabaseError as exc:
            logger.warning("readyz: database unreachable", extra={"error": str(exc)})
            connection.close()  # the next probe reconnects
            return "unreachable"

    def _ping_redis(self) -> str:
        import redis

        from core.redis_clients import sync_client

        if self._redis is None:
            self._redis = sync_client(
                settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1
            )
        try:
            self._redis.ping()
            return "ok"
        except redis.RedisError as exc:
            logger.warning("readyz: redis unreachable", extra={"error": str(exc)})
            return "unreachable"


class Readiness:
    """Cached (`ttl` seconds), single-flight readiness. `clock` is injectable for tests."""

    def __init__(
        self,
        probe: Callable[[], dict[str, str]] | None = None,
        *,
        ttl: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._probe = probe
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._result: dict[str, str] | None = None
        self._expires = float("-inf")
        self._thread: _ProbeThread | None = None

    def _run_probe(self) -> dict[str, str]:
        if self._probe is not None:
            return self._probe()
        if self._thread is None:
            self._thread = _ProbeThread()
        return self._thread.run()

    def checks(self) -> dict[str, str]:
        result = self._result
        if result is not None and self._clock() < self._expires:
            return result
        with self._lock:  # one probe in flight; the others wait here and share its result
            if self._result is not None and self._clock() < self._expires:
                return self._result
            result = self._run_probe()
            ttl = settings.EZAT_READYZ_CACHE_SECONDS if self._ttl is None else self._ttl
            self._result, self._expires = result, self._clock() + ttl
            return result


readiness = Readiness()


def readyz(request: HttpRequest) -> JsonResponse:
    """200 while this node can take requests; 503 while it drains (ezat/asgi.py answers that).

    A database or Redis that does not answer is reported ("degraded") but, by default, does not
    fail readiness: every node shares them, so failing would take every node out of the load
    balancer at once and turn a partial outage into a total one. A degraded node still serves
    what it can: cached keys answer and their usage goes to the spool (billing/spool.py), and
    what it cannot serve gets its own retryable JSON 503 instead of the balancer's HTML one.
    EZAT_READYZ_REQUIRE_DEPENDENCIES=true fails readiness too, for balancers in front of nodes
    whose dependencies differ."""
    checks = readiness.checks()
    healthy = all(v == "ok" for v in checks.values())
    if healthy:
        return JsonResponse({"status": "ok", **checks})
    if settings.EZAT_READYZ_REQUIRE_DEPENDENCIES:
        return JsonResponse({"status": "unavailable", **checks}, status=503)
    return JsonResponse({"status": "degraded", **checks})


def metrics(request: HttpRequest) -> HttpResponse:
    """Served to EZAT_METRICS_ALLOWED_IPS (default loopback) or to a bearer of
    EZAT_METRICS_TOKEN; anyone else gets a 403 (labels name models, deployments, maybe orgs)."""
    if not metrics_allowed(request):
        return HttpResponse("forbidden\n", status=403, content_type="text/plain")
    return HttpResponse(generate_latest(), content_type=CONTENT_TYPE_LATEST)


def metrics_allowed(request: HttpRequest) -> bool:
    token = settings.EZAT_METRICS_TOKEN
    auth = request.headers.get("authorization", "")
    if token and auth[:7].lower() == "bearer ":
        return hmac.compare_digest(auth[7:].strip().encode(), token.encode())
    return request.META.get("REMOTE_ADDR", "") in settings.EZAT_METRICS_ALLOWED_IPS
