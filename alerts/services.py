"""Writes for alerts: settings, threshold transitions (once per crossing), deliveries.

Evaluation runs in Celery (beat, and after an owner saves settings), never on a request path.
A crossing is claimed inside a transaction holding the threshold's state row, so two
evaluations at once create one alert; the alert row is unique per (org, kind, subject,
crossing) besides. Deliveries are separate tasks that record their outcome on the alert and
skip a channel already delivered, so a redelivered task message sends nothing twice.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from accounts.models import ApiKey, Organization
from alerts import selectors, signing, webhook
from alerts.models import AlertEvent, AlertKind, AlertSettings, AlertState, WebhookDelivery
from core import money

USD = 1_000_000_000
KEY_CAP_LEVELS = ((80, AlertKind.KEY_CAP_80), (100, AlertKind.KEY_CAP_100))
PERIOD_WORDS = {"month": "per UTC month", "day": "per UTC day", "total": "in total"}


def usd(nano: int) -> str:
    return money.usd_total(nano)


def save_settings(
    *,
    org: Organization,
    low_balance_nano: int | None,
    key_cap_alerts: bool,
    email_enabled: bool,
    webhook_url: str,
    updated_by: str,
) -> AlertSettings:
    if low_balance_nano is not None and low_balance_nano < 0:
        raise ValueError("low_balance_nano must not be negative")
    if webhook_url:
        webhook.check_webhook_url(webhook_url)
    with transaction.atomic():
        row, _ = AlertSettings.objects.select_for_update().get_or_create(
            org=org, defaults={"webhook_secret": signing.new_secret()}
        )
        row.low_balance_nano = low_balance_nano
        row.key_cap_alerts = key_cap_alerts
        row.email_enabled = email_enabled
        row.webhook_url = webhook_url
        row.updated_by = updated_by
        row.save()
        transaction.on_commit(lambda: _enqueue_evaluation(org.pk))
    return row


def rotate_secret(*, org: Organization) -> AlertSettings:
    with transaction.atomic():
        row, _ = AlertSettings.objects.select_for_update().get_or_create(
            org=org, defaults={"webhook_secret": signing.new_secret()}
        )
        row.webhook_secret = signing.new_secret()
        row.save(update_fields=["webhook_secret", "updated_at"])
    return row


def _enqueue_evaluation(org_id: int) -> None:
    # Lazy: the tasks call these services (tests/foundation/test_import_cycles.py, ALLOWED).
    from alerts.tasks import evaluate_org_alerts

    evaluate_org_alerts.delay(org_id)


@dataclass(frozen=True)
class Condition:
    kind: str
    subject: str
    crossed: bool
    message: str
    data: dict[str, Any]
    api_key: ApiKey | None = None


def conditions(org: Organization, row: AlertSettings) -> list[Condition]:
    found: list[Condition] = []
    if row.low_balance_nano is not None:
        available = selectors.available_balance_nano(org)
        found.append(
            Condition(
                kind=AlertKind.LOW_BALANCE,
                subject="org",
                crossed=available < row.low_balance_nano,
                message=(
                    f"{org.name}: available balance {usd(available)} is below "
                    f"{usd(row.low_balance_nano)}"
                ),
                data={
                    "available_balance_usd": money.usd_from_nano(available),
                    "threshold_usd": money.usd_from_nano(row.low_balance_nano),
                },
            )
        )
    if row.key_cap_alerts:
        for key in selectors.capped_keys(org):
            cap = key.spend_cap_nano or 0
            spent = selectors.key_cap_spend_nano(key)
            for percent, kind in KEY_CAP_LEVELS:
                found.append(
                    Condition(
                        kind=kind,
                        subject=f"key:{key.pk}",
                        crossed=cap > 0 and spent * 100 >= cap * percent,
                        message=(
                            f"{org.name}: key {key.name or key.prefix} spent {usd(spent)}, "
                            f"{percent} % of its cap of {usd(cap)} "
                            f"({PERIOD_WORDS.get(key.spend_cap_period, key.spend_cap_period)}) "
                            "or more"
                        ),
                        data={
                            "key": {"id": key.pk, "name": key.name, "prefix": key.prefix},
                            "spent_usd": money.usd_from_nano(spent),
                            "cap_usd": money.usd_from_nano(cap),
                            "cap_period": key.spend_cap_period,
                            "percent": percent,
                        },
                        api_key=key,
                    )
                )
    return found


def _apply(org: Organization, row: AlertSettings, cond: Condition) -> AlertEvent | None:
    """Move one threshold's state; an alert only on not-crossed → crossed."""
    with transaction.atomic():
        AlertState.objects.get_or_create(org=org, kind=cond.kind, subject=cond.subject)
        state = AlertState.objects.select_for_update().get(
            org=org, kind=cond.kind, subject=cond.subject
        )
        if not cond.crossed:
            if state.triggered:
                state.triggered = False
                state.save(update_fields=["triggered", "updated_at"])
            return None
        if state.triggered:
            return None
        state.triggered = True
        state.crossings += 1
        state.save(update_fields=["triggered", "crossings", "updated_at"])
        off, pending = AlertEvent.Delivery.OFF, AlertEvent.Delivery.PENDING
        event = AlertEvent.objects.create(
            org=org,
            kind=cond.kind,
            subject=cond.subject,
            crossing=state.crossings,
            api_key=cond.api_key,
            message=cond.message[:300],
            payload={"type": cond.kind, "org": {"id": org.pk, "name": org.name}, **cond.data},
            email_status=pending if row.email_enabled else off,
            webhook_url=row.webhook_url,
            webhook_status=pending if row.webhook_url else off,
        )
        transaction.on_commit(lambda: _enqueue_deliveries(event))
        return event


def _enqueue_deliveries(event: AlertEvent) -> None:
    # Lazy: the tasks call these services (tests/foundation/test_import_cycles.py, ALLOWED).
    from alerts.tasks import deliver_email, deliver_webhook

    if event.email_status == AlertEvent.Delivery.PENDING:
        deliver_email.delay(event.pk)
    if event.webhook_status == AlertEvent.Delivery.PENDING:
        deliver_webhook.delay(event.pk)


def evaluate_org(org_id: int) -> list[int]:
    """Check an org's thresholds; returns the ids of alerts created (one per new crossing)."""
    row = AlertSettings.objects.select_related("org").filter(org_id=org_id).first()
    if row is None:
        return []
    created = []
    for cond in conditions(row.org, row):
        event = _apply(row.org, row, cond)
        if event is not None:
            created.append(event.pk)
    return created


def evaluate_all() -> list[int]:
    created: list[int] = []
    for row in selectors.orgs_with_alerts():
        created.extend(evaluate_org(row.org_id))
    return created


def body_of(event: AlertEvent) -> bytes:
    return orjson.dumps(
        {
            "id": f"alert_{event.pk}",
            "created_at": event.created_at.isoformat(),
            "message": event.message,
            **event.payload,
        }
    )


def send_email(event_id: int) -> bool:
    """E-mail the owners once; True when sent now."""
    with transaction.atomic():
        event = AlertEvent.objects.select_for_update().select_related("org").get(pk=event_id)
        if event.email_status != AlertEvent.Delivery.PENDING:
            return False
        recipients = selectors.owner_emails(event.org)
        if not recipients:
            event.email_status = AlertEvent.Delivery.OFF
            event.save(update_fields=["email_status"])
            return False
        # Inside the row lock: a concurrent redelivery waits, then sees SENT.
        send_mail(
            subject=f"[EZAT Router] {event.get_kind_display()}: {event.org.name}",
            message=f"{event.message}.\n\n{orjson.dumps(event.payload).decode()}\n",
            from_email=settings.DEFAULT_FROM_EMAIL,
            recipient_list=recipients,
        )
        event.email_status = AlertEvent.Delivery.SENT
        event.email_sent_at = timezone.now()
        event.save(update_fields=["email_status", "email_sent_at"])
    return True


def send_webhook(event_id: int, *, final_attempt: bool) -> bool:
    """POST the signed alert once; True when delivered now, DeliveryFailed to retry.

    The alert row stays locked during the POST, so a redelivered task message waits and then
    finds it sent. A failure is recorded and committed before DeliveryFailed is raised."""
    with transaction.atomic():
        event = AlertEvent.objects.select_for_update().select_related("org").get(pk=event_id)
        if event.webhook_status != AlertEvent.Delivery.PENDING:
            return False
        secret = AlertSettings.objects.values_list("webhook_secret", flat=True).get(org=event.org)
        body = body_of(event)
        headers = {
            **signing.signed_headers(secret, int(time.time()), body),
            signing.EVENT_HEADER: event.kind,
            signing.DELIVERY_HEADER: f"alert_{event.pk}",
        }
        event.webhook_attempts += 1
        try:
            logged_post(
                event.org,
                event.webhook_url,
                body,
                headers,
                event=event,
                attempt=event.webhook_attempts,
            )
        except webhook.DeliveryFailed as exc:
            failure = exc
        else:
            event.webhook_status = AlertEvent.Delivery.SENT
            event.webhook_delivered_at = timezone.now()
            event.webhook_last_error = ""
            event.save(
                update_fields=[
                    "webhook_attempts",
                    "webhook_status",
                    "webhook_delivered_at",
                    "webhook_last_error",
                ]
            )
            return True
        event.webhook_last_error = str(failure)[: webhook.MAX_ERROR]
        if final_attempt:
            event.webhook_status = AlertEvent.Delivery.FAILED
        event.save(update_fields=["webhook_attempts", "webhook_last_error", "webhook_status"])
    if final_attempt:
        return False
    raise failure


def logged_post(
    org: Organization,
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    event: AlertEvent | None = None,
    attempt: int = 1,
) -> WebhookDelivery:
    """POST once and log it (the delivery log): the row is written whatever the outcome, in
    the caller's transaction; DeliveryFailed is raised after, for the caller's retry."""
    started = time.monotonic()
    status: int | None = None
    failure: webhook.DeliveryFailed | None = None
    try:
        status = webhook.post(url, body, headers)
    except webhook.DeliveryFailed as exc:
        failure, status = exc, exc.status
    row = WebhookDelivery.objects.create(
        org=org,
        event=event,
        kind=headers.get(signing.EVENT_HEADER, ""),
        delivery_id=headers.get(signing.DELIVERY_HEADER, ""),
        url=url,
        attempt=attempt,
        outcome=WebhookDelivery.Outcome.FAILED if failure else WebhookDelivery.Outcome.OK,
        http_status=status,
        error="" if failure is None else str(failure)[: webhook.MAX_ERROR],
        latency_ms=int((time.monotonic() - started) * 1000),
    )
    if failure is not None:
        raise failure
    return row


class NoWebhook(Exception):
    """A test event was asked for, but the org has no webhook URL saved."""


def send_test_event(*, org: Organization) -> WebhookDelivery:
    """One signed `test` event to the saved URL, now, without retries: the owner sees at once
    whether the receiver answers and verifies the signature. Logged like any delivery."""
    row = selectors.org_settings(org)
    if row is None or not row.webhook_url:
        raise NoWebhook("save a webhook URL first")
    delivery_id = f"test_{secrets.token_hex(6)}"
    body = orjson.dumps(
        {
            "id": delivery_id,
            "type": "test",
            "created_at": timezone.now().isoformat(),
            "message": "Test event from EZAT Router: your webhook receives alerts.",
            "org_id": org.pk,
        }
    )
    headers = {
        **signing.signed_headers(row.webhook_secret, int(time.time()), body),
        signing.EVENT_HEADER: "test",
        signing.DELIVERY_HEADER: delivery_id,
    }
    try:
        return logged_post(org, row.webhook_url, body, headers)
    except webhook.DeliveryFailed:
        return WebhookDelivery.objects.filter(org=org, delivery_id=delivery_id).get()
