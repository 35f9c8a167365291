"""Celery tasks of the gateway app. Thin: the work lives in gateway/services.py."""

from __future__ import annotations

from ezat.celery import app
from gateway.services import DEFAULT_PURGE_BATCH, purge_expired_responses


@app.task(name="gateway.tasks.purge_stored_responses", acks_late=True, ignore_result=True)
def purge_stored_responses(batch_size: int = DEFAULT_PURGE_BATCH, max_batches: int = 100) -> int:
    """Delete stored responses past their retention (scheduled by beat; idempotent)."""
    return purge_expired_responses(batch_size=batch_size, max_batches=max_batches)
