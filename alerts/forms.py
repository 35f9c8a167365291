"""The owner's alert settings form. Thresholds are entered in USD, stored in nano-USD."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms

from alerts.models import AlertSettings
from alerts.webhook import WebhookURLError, check_webhook_url
from core import money
from core.money import usd_to_nano
from core.money_fields import AmountField


class AlertSettingsForm(forms.Form):
    low_balance_usd = AmountField(
        label="Low balance alert below (USD)",
        max_digits=18,
        decimal_places=9,
        required=False,
        help_text="Alert once when the available balance falls below this. Empty = off.",
    )
    key_cap_alerts = forms.BooleanField(
        label="Alert when a key reaches 80 % and 100 % of its spend cap",
        required=False,
        initial=True,
    )
    email_enabled = forms.BooleanField(
        label="E-mail the organization's owners", required=False, initial=True
    )
    webhook_url = forms.CharField(
        label="Webhook URL",
        max_length=500,
        required=False,
        help_text="A public https:// or http:// address; each alert is POSTed as signed JSON.",
        widget=forms.URLInput(attrs={"placeholder": "https://example.com/hooks/ezat"}),
    )

    @classmethod
    def for_settings(cls, row: AlertSettings | None, data: Any = None) -> AlertSettingsForm:
        initial: dict[str, Any] = {}
        if row is not None:
            initial = {
                "low_balance_usd": (
                    money.usd_from_nano(row.low_balance_nano)
                    if row.low_balance_nano is not None
                    else ""
                ),
                "key_cap_alerts": row.key_cap_alerts,
                "email_enabled": row.email_enabled,
                "webhook_url": row.webhook_url,
            }
        return cls(data=data, initial=initial)

    def clean_low_balance_usd(self) -> Decimal | None:
        value = self.cleaned_data.get("low_balance_usd")
        if value is not None and value < 0:
            raise forms.ValidationError("The threshold cannot be negative.")
        return value

    def clean_webhook_url(self) -> str:
        value = (self.cleaned_data.get("webhook_url") or "").strip()
        if not value:
            return ""
        try:
            return check_webhook_url(value)
        except WebhookURLError as exc:
            raise forms.ValidationError(str(exc)) from None

    @property
    def low_balance_nano(self) -> int | None:
        value = self.cleaned_data.get("low_balance_usd")
        return None if value is None else usd_to_nano(value)
