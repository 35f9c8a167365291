"""Gauges computed when /metrics is scraped (nothing on the request path): deployments cooling
down, the usage writer's queues and lag, reconciliation lag, and image downloads in flight."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gateway.metrics import SIDE_EFFECT_FAILURES

logger = logging.getLogger(__name__)


_NAMES = (
    "ezat_deployments_cooling",
    "ezat_writer_queue_depth",
    "ezat_writer_lag_seconds",
    "ezat_reconciliation_lag_seconds",
    "ezat_image_download_bytes_in_flight",
    "ezat_image_downloads_in_flight",
)


class GatewayCollector(Collector):
    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The names only: without this, registering would call collect() (imports, a query)
        under the registry's lock."""
        for name in _NAMES:
            yield GaugeMetricFamily(name, name)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from billing.recorder import writer
        from gateway.routing import health

        now = time.time()
        cooling = sum(1 for d in list(health._cooling_until) if health.is_cooling(d, now))
        yield GaugeMetricFamily(
            "ezat_deployments_cooling", "Deployments in a cooldown now (this process)", cooling
        )
        depth = GaugeMetricFamily(
            "ezat_writer_queue_depth", "Rows waiting for the usage writer", labels=["queue"]
        )
        depth.add_metric(["usage"], writer.usage_queue_depth)
        depth.add_metric(["request_log"], writer.log_queue_depth)
        yield depth
        yield GaugeMetricFamily(
            "ezat_writer_lag_seconds",
            "Age of the oldest row waiting for the usage writer (0 when none)",
            writer.lag_seconds(),
        )
        yield from _image_downloads()
        lag = _reconciliation_lag(now)
        if lag is not None:
            yield GaugeMetricFamily(
                "ezat_reconciliation_lag_seconds",
                "Age of the oldest usage record not yet charged to the ledger (0 when none)",
                lag,
            )


def _image_downloads() -> Iterator[GaugeMetricFamily]:
    # The fetcher exists once a request carried an image URL; before that nothing is in flight
    # (and its httpx client is not imported for a scrape).
    from gateway.handlers import translated

    fetcher = translated._fetcher
    in_flight = fetcher.memory.in_flight if fetcher is not None else None
    yield GaugeMetricFamily(
        "ezat_image_download_bytes_in_flight",
        "Raw image bytes buffered by downloads still running (this process)",
        in_flight.bytes if in_flight is not None else 0,
    )
    yield GaugeMetricFamily(
        "ezat_image_downloads_in_flight",
        "Image downloads running (this process)",
        in_flight.downloads if in_flight is not None else 0,
    )


def _reconciliation_lag(now: float) -> float | None:
    from django.core.exceptions import SynchronousOnlyOperation
    from django.db import DatabaseError

    from billing.models import UsageRecord

    try:
        # The partial index on unreconciled ids: the lowest id is the oldest record.
        oldest = (
            UsageRecord.objects.filter(ledger_entry__isnull=True)
            .order_by("id")
            .values_list("created_at", flat=True)
            .first()
        )
    except DatabaseError:
        SIDE_EFFECT_FAILURES.labels("metrics_reconciliation_lag").inc()
        logger.warning("reconciliation lag unavailable (database)")
        return None
    except SynchronousOnlyOperation:
        # The registry was read on an event loop thread (an async caller sampling a metric, e.g.
        # the gateway's own code or a test): no blocking query there. /metrics itself is a sync
        # view on a worker thread, so scrapes always carry the gauge.
        SIDE_EFFECT_FAILURES.labels("metrics_reconciliation_lag_async").inc()
        return None
    return max(now - oldest.timestamp(), 0.0) if oldest is not None else 0.0


_registered = False


def register() -> None:
    """Once per process (AppConfig.ready): the scrape-time gauges, and no `_created` series."""
    global _registered
    if _registered:
        return
    _registered = True
    from prometheus_client import REGISTRY, disable_created_metrics

    disable_created_metrics()
    REGISTRY.register(GatewayCollector())
