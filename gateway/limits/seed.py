"""Money state read from the database, for seeding and reseeding the limiters.

The DB is the truth; the limiters only keep a fast, conservative copy. Each number is read in ONE
SQL statement, so under PostgreSQL's READ COMMITTED it comes from one snapshot: reading the
balance and the unreconciled sum in two statements could straddle a reconciliation (balance
read before the debit, the usage rows read after they were marked reconciled) and count the
same usage as not spent at all.

Callers must write a usage record before they settle its hold (common.py explains why the
seeding arithmetic relies on it).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections
from django.db.models import BigIntegerField, OuterRef, Subquery, Sum, Value
from django.db.models.functions import Coalesce

logger = logging.getLogger("gateway.limits")


def org_available_sync(org_id: int) -> int:
    """balance (= Σ ledger) − Σ cost of usage not yet debited by reconciliation; 0 if no org."""
    from accounts.models import Organization
    from billing.models import UsageRecord

    close_old_connections()
    unreconciled = (
        UsageRecord.objects.filter(org_id=OuterRef("pk"), ledger_entry__isnull=True)
        .order_by()
        .values("org_id")
        .annotate(total=Sum("cost_nano"))
        .values("total")
    )
    row = (
        Organization.objects.filter(pk=org_id)
        .order_by()
        .annotate(
            unreconciled=Coalesce(
                Subquery(unreconciled, output_field=BigIntegerField()),
                Value(0),
                output_field=BigIntegerField(),
            )
        )
        .values_list("balance_nano", "unreconciled")
        .first()
    )
    if row is None:  # unknown org: nothing to spend
        return 0
    balance, pending = row
    return int(balance) - int(pending)


def key_month_spent_sync(key_id: int, start: datetime, end: datetime) -> int:
    """Σ cost of the key's usage records created in [start, end) (reconciled or not)."""
    from billing.models import UsageRecord

    close_old_connections()
    total = UsageRecord.objects.filter(
        api_key_id=key_id, created_at__gte=start, created_at__lt=end
    ).aggregate(total=Coalesce(Sum("cost_nano"), Value(0), output_field=BigIntegerField()))["total"]
    return int(total)


class DbMoneySource:
    """The default MoneySource: the ORM, run off the event loop on a small dedicated pool.

    Dedicated (not the loop's default executor): seeds must not queue behind getaddrinfo calls
    or other blocking work, and the pool bounds the DB connections seeding holds to `workers`
    (each worker thread keeps its connection under CONN_MAX_AGE; close_old_connections() at the
    start of every read recycles stale ones). Not the shared "thread-sensitive" thread either:
    these short reads must not wait behind Django's sync views and middleware.
    """

    def __init__(self, workers: int = 4) -> None:
        self._workers = workers
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self._workers, thread_name_prefix="ezat-limits-db"
                )
            return self._executor

    async def org_available(self, org_id: int) -> int:
        run = sync_to_async(org_available_sync, thread_sensitive=False, executor=self._pool())
        return await run(org_id)

    async def key_month_spent(self, key_id: int, start: datetime, end: datetime) -> int:
        run = sync_to_async(key_month_spent_sync, thread_sensitive=False, executor=self._pool())
        return await run(key_id, start, end)

    def close(self) -> None:
        """Close every worker's DB connection and stop the pool (blocking; reusable after).

        One job per worker, held at a barrier until all have started, so each runs on a
        different thread and every thread's connection is closed (tests drop their database
        afterwards; a lingering session would block that).
        """
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is None:
            return
        barrier = threading.Barrier(self._workers)

        def close_here() -> None:
            try:
                barrier.wait(timeout=5)
            except threading.BrokenBarrierError:
                # Fewer threads than workers (a stuck one): close what this thread holds anyway.
                logger.warning("limits: seed pool closed without every worker responding")
            connections.close_all()

        for future in [executor.submit(close_here) for _ in range(self._workers)]:
            future.result()
        executor.shutdown(wait=True)
