"""Celery tasks for billing. Thin: the work and its guarantees live in billing/reconcile.py."""

from __future__ import annotations

from billing.reconcile import DEFAULT_BATCH_SIZE, reconcile_all
from ezat.celery import app

# Bounds one run (100k records at the default batch size); beat's next tick continues.
MAX_BATCHES_PER_RUN = 200


@app.task(
    name="billing.tasks.reconcile_usage",
    # Ack after the work: a worker lost mid-batch (its transaction rolled back) gets the message
    # redelivered. Safe because reconciliation is idempotent: a redelivered or duplicated message
    # finds the already-charged records reconciled and charges only what is still open.
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def reconcile_usage(
    batch_size: int = DEFAULT_BATCH_SIZE, max_batches: int = MAX_BATCHES_PER_RUN
) -> dict[str, int]:
    """Charge unreconciled usage records to their orgs' ledgers (scheduled by beat)."""
    # No autoretry: a failed run charged nothing, and beat runs the task again within seconds.
    return reconcile_all(batch_size=batch_size, max_batches=max_batches).as_dict()


@app.task(name="billing.tasks.purge_request_log", acks_late=True, ignore_result=True)
def purge_request_log(batch_size: int = 5000, max_batches: int = 100) -> int:
    """Remove request-log rows past EZAT_REQUEST_LOG_RETENTION_DAYS (beat; idempotent): whole
    monthly partitions dropped on PostgreSQL, rows deleted in batches on SQLite."""
    from billing.request_log import purge_expired

    return purge_expired(batch_size=batch_size, max_batches=max_batches)


@app.task(name="billing.tasks.ensure_partitions", acks_late=True, ignore_result=True)
def ensure_partitions(months_ahead: int | None = None) -> list[str]:
    """Create the monthly partitions of the usage records and the request log ahead of time
    (PostgreSQL; beat; idempotent: existing partitions are left alone). Returns those created."""
    from billing.partitions import ensure_partitions as ensure

    return ensure(months_ahead=months_ahead)
