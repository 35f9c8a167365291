"""Celery tasks for alerts. Thin: the guarantees live in alerts/services.py."""

from __future__ import annotations

from celery import Task
from django.conf import settings

from alerts import services
from alerts.webhook import DeliveryFailed
from ezat.celery import app


@app.task(name="alerts.tasks.evaluate_alerts", acks_late=True, ignore_result=True)
def evaluate_alerts() -> int:
    """Every org's thresholds (beat). Idempotent: a crossing alerts once."""
    return len(services.evaluate_all())


@app.task(name="alerts.tasks.evaluate_org_alerts", acks_late=True, ignore_result=True)
def evaluate_org_alerts(org_id: int) -> int:
    return len(services.evaluate_org(org_id))


@app.task(
    name="alerts.tasks.deliver_email",
    acks_late=True,
    ignore_result=True,
    autoretry_for=(OSError,),  # SMTP connection errors
    retry_backoff=True,
    max_retries=6,
)
def deliver_email(event_id: int) -> bool:
    return services.send_email(event_id)


def backoff_seconds(retries: int) -> float:
    """base × 2^retries, capped (EZAT_ALERT_RETRY_BASE_SECONDS, default 10 s → 10, 20, 40 …)."""
    base = float(settings.EZAT_ALERT_RETRY_BASE_SECONDS)
    return min(base * (2**retries), 3600.0)


@app.task(name="alerts.tasks.deliver_webhook", bind=True, acks_late=True, ignore_result=True)
def deliver_webhook(self: Task, event_id: int) -> bool:
    max_retries = int(settings.EZAT_ALERT_WEBHOOK_MAX_RETRIES)
    final = self.request.retries >= max_retries
    try:
        return services.send_webhook(event_id, final_attempt=final)
    except DeliveryFailed as exc:
        raise self.retry(
            exc=exc, countdown=backoff_seconds(self.request.retries), max_retries=max_retries
        ) from None
