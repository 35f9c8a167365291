from __future__ import annotations

from django.apps import AppConfig


class AlertsConfig(AppConfig):
    """Per-org alerts (low balance, key spend cap) delivered by e-mail and a signed webhook.

    Sits above billing and accounts: it reads balances and spend, they never import it."""

    name = "alerts"
    default_auto_field = "django.db.models.BigAutoField"
