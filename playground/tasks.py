"""Celery tasks for the Playground. Thin: see playground/services.py."""

from __future__ import annotations

from ezat.celery import app
from playground import services


@app.task(name="playground.tasks.revoke_expired_keys", acks_late=True, ignore_result=True)
def revoke_expired_keys() -> int:
    return services.revoke_expired_keys()
