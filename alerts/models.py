"""Alert settings of an org, the state of each threshold, and the alerts sent."""

from __future__ import annotations

from django.db import models

from accounts.models import ApiKey, Organization


class AlertKind(models.TextChoices):
    LOW_BALANCE = "low_balance", "Low balance"
    KEY_CAP_80 = "key_cap_80", "Key at 80 % of its spend cap"
    KEY_CAP_100 = "key_cap_100", "Key reached its spend cap"


class AlertSettings(models.Model):
    """What an org's owners want to hear about, and where. One row per org (created on save)."""

    org = models.OneToOneField(
        Organization, on_delete=models.CASCADE, related_name="alert_settings"
    )
    low_balance_nano = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Alert when the available balance falls below this (nano-USD); empty = off.",
    )
    key_cap_alerts = models.BooleanField(
        default=True, help_text="Alert when a key reaches 80 % and 100 % of its spend cap."
    )
    email_enabled = models.BooleanField(default=True, help_text="E-mail the org's owners.")
    webhook_url = models.URLField(max_length=500, blank=True)
    # The shared secret the webhook is signed with (HMAC-SHA256). Shown to owners so their
    # receiver can verify; rotated on demand.
    webhook_secret = models.CharField(max_length=80, editable=False)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=150, blank=True)

    def __str__(self) -> str:
        return f"alerts of {self.org}"


class AlertState(models.Model):
    """Whether one threshold is currently crossed. An alert fires on the transition
    not crossed → crossed (then `crossings` counts up); the state re-arms when the condition
    clears (a top-up, a new cap period)."""

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=20, choices=AlertKind.choices)
    subject = models.CharField(max_length=40, help_text='"org" or "key:<id>".')
    triggered = models.BooleanField(default=False)
    crossings = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["org", "kind", "subject"], name="uniq_alert_state")
        ]

    def __str__(self) -> str:
        state = "crossed" if self.triggered else "armed"
        return f"{self.org_id} {self.kind} {self.subject}: {state}"


class AlertEvent(models.Model):
    """One alert (one crossing), and how its deliveries went. Unique per crossing: a second
    evaluation of the same crossing cannot create a second alert."""

    class Delivery(models.TextChoices):
        PENDING = "pending", "Pending"
        SENT = "sent", "Sent"
        FAILED = "failed", "Failed"
        OFF = "off", "Not configured"

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="alert_events")
    kind = models.CharField(max_length=20, choices=AlertKind.choices)
    subject = models.CharField(max_length=40)
    crossing = models.PositiveIntegerField()
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    message = models.CharField(max_length=300)
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    email_status = models.CharField(max_length=10, choices=Delivery.choices)
    email_sent_at = models.DateTimeField(null=True, blank=True)
    webhook_url = models.URLField(max_length=500, blank=True)
    webhook_status = models.CharField(max_length=10, choices=Delivery.choices)
    webhook_attempts = models.PositiveIntegerField(default=0)
    webhook_delivered_at = models.DateTimeField(null=True, blank=True)
    webhook_last_error = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["org", "kind", "subject", "crossing"], name="uniq_alert_crossing"
            )
        ]

    def __str__(self) -> str:
        return f"{self.org}: {self.message}"


class WebhookDelivery(models.Model):
    """One POST to an org's webhook (issue 34's delivery log): an alert's attempt or a test
    event. Every attempt is a row, so retries show as attempts 1, 2, 3 of one event."""

    class Outcome(models.TextChoices):
        OK = "ok", "Delivered"
        FAILED = "failed", "Failed"

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    event = models.ForeignKey(
        AlertEvent, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries"
    )
    kind = models.CharField(max_length=20, help_text='The X-EZAT-Event header ("test" too).')
    delivery_id = models.CharField(max_length=40, help_text="The X-EZAT-Delivery header.")
    url = models.URLField(max_length=500)
    attempt = models.PositiveIntegerField(default=1)
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    http_status = models.PositiveIntegerField(null=True, blank=True)
    error = models.CharField(max_length=300, blank=True)
    latency_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["org", "-created_at"], name="alerts_delivery_org_time")]

    def __str__(self) -> str:
        return f"{self.delivery_id} attempt {self.attempt}: {self.outcome}"
