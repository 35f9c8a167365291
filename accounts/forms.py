"""Dashboard and admin forms for keys and members. Money is entered in USD, stored in nano-USD."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django import forms
from django.utils import timezone

from accounts import ip_allow
from accounts.models import ApiKey, Membership
from core import money
from core.money import usd_to_nano
from core.money_fields import AmountField


def usd_initial(nano: int | None) -> str:
    """A nano-USD amount as a plain decimal for a form field ("12.5", never "1.25E+1")."""
    if nano is None:
        return ""
    return money.usd_from_nano(nano)


class KeyLimitsForm(forms.Form):
    name = forms.CharField(max_length=100, required=False, help_text="For you: which app uses it.")
    rpm_limit = forms.IntegerField(
        label="Requests per minute",
        min_value=1,
        max_value=1_000_000,
        required=False,
        help_text="Empty = the default limit.",
    )
    max_concurrency = forms.IntegerField(
        label="Requests in flight",
        min_value=1,
        max_value=1_000_000,
        required=False,
        help_text="Concurrent requests of this key. Empty = the default limit.",
    )
    spend_cap_usd = AmountField(
        label="Spend cap (USD)",
        min_value=Decimal(0),
        max_digits=18,
        decimal_places=9,
        required=False,
        help_text="Empty = no cap. Requests that could exceed it are refused (402).",
    )
    spend_cap_period = forms.ChoiceField(
        label="Cap period",
        choices=ApiKey.CapPeriod.choices,
        initial=ApiKey.CapPeriod.MONTH,
        required=False,
        help_text="The cap resets on the period's boundary in UTC (a total never resets).",
    )
    expires_at = forms.DateTimeField(
        label="Expires (UTC)",
        required=False,
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        help_text="Empty = never. After it, calls get 401 saying the key expired.",
    )
    allowed_models = forms.MultipleChoiceField(
        label="Allowed models",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked = every model. Other models get 403 permission_error; "
        "ezat/auto and fallbacks skip them.",
    )

    allowed_ips = forms.CharField(
        label="Allowed IPs",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "203.0.113.0/24, 2001:db8::/32"}),
        help_text="CIDRs or addresses, separated by commas or new lines. Empty = anywhere. "
        "Calls from elsewhere get 403 naming their address.",
    )

    def __init__(
        self, *args: Any, model_choices: list[tuple[str, str]] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fields["allowed_models"].choices = model_choices or []  # type: ignore[attr-defined]

    @classmethod
    def for_key(
        cls, key: ApiKey, data: Any = None, model_choices: list[tuple[str, str]] | None = None
    ) -> KeyLimitsForm:
        choices = list(model_choices or [])
        known = {value for value, _ in choices}
        # A model on the key's list that has left the catalog stays visible (and removable).
        choices += [(m, f"{m} (not in the catalog)") for m in key.allowed_models if m not in known]
        initial = {
            "name": key.name,
            "rpm_limit": key.rpm_limit,
            "max_concurrency": key.max_concurrency,
            "spend_cap_usd": usd_initial(key.spend_cap_nano),
            "spend_cap_period": key.spend_cap_period,
            # At the input's resolution (minutes), so an untouched field reads as unchanged.
            "expires_at": None
            if key.expires_at is None
            else key.expires_at.astimezone(UTC).replace(second=0, microsecond=0),
            "allowed_models": list(key.allowed_models),
            "allowed_ips": "\n".join(key.allowed_ips or []),
        }
        return cls(data=data, initial=initial, model_choices=choices)

    def clean_allowed_ips(self) -> list[str]:
        # Checked here too, so a typo shows on the field before anything is saved.
        try:
            return ip_allow.clean_networks(
                ip_allow.split_text(self.cleaned_data.get("allowed_ips") or "")
            )
        except ip_allow.InvalidNetwork as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_spend_cap_period(self) -> str:
        return self.cleaned_data.get("spend_cap_period") or ApiKey.CapPeriod.MONTH

    def clean_expires_at(self) -> datetime | None:
        value: datetime | None = self.cleaned_data.get("expires_at")
        if value is None:
            return None
        # Entered in UTC (the label says so), whatever the server's time zone.
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        if "expires_at" in self.changed_data and value <= timezone.now():
            raise forms.ValidationError("The expiry must be in the future.")
        return value

    @property
    def spend_cap_nano(self) -> int | None:
        value = self.cleaned_data.get("spend_cap_usd")
        return None if value is None else usd_to_nano(value)


class KeyCreateForm(KeyLimitsForm):
    """Same fields as editing; kept separate so the two pages can diverge."""


class InviteForm(forms.Form):
    """Invite by e-mail. Only the address's syntax is checked: whether it has an account is
    never looked at here, so the form answers the same for every address."""

    email = forms.EmailField(label="Email", max_length=254)
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.MEMBER)


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Membership.Role.choices)

    def __init__(self, *args: Any, membership: Membership, owners: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.membership = membership
        self.owners = owners

    def clean_role(self) -> str:
        role = self.cleaned_data["role"]
        is_last_owner = self.membership.role == Membership.Role.OWNER and self.owners <= 1
        if is_last_owner and role != Membership.Role.OWNER:
            raise forms.ValidationError("An organization needs at least one owner.")
        return role


class FallbackChainForm(forms.Form):
    """An org's chain for one model: up to five models, in order (blank ones are skipped).
    The service checks the list (known models, each once, not the model itself)."""

    SLOTS = 5

    def __init__(self, *args: Any, choices: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        options = [("", "—"), *choices]
        for n in range(1, self.SLOTS + 1):
            self.fields[f"model_{n}"] = forms.ChoiceField(
                label=f"{n}.", choices=options, required=False
            )

    @classmethod
    def for_chain(
        cls, chain: list[str], choices: list[tuple[str, str]], data: Any = None
    ) -> FallbackChainForm:
        initial = {f"model_{n}": model_id for n, model_id in enumerate(chain, start=1)}
        return cls(data=data, initial=initial, choices=choices)

    @property
    def chain(self) -> list[str]:
        return [
            value
            for n in range(1, self.SLOTS + 1)
            if (value := self.cleaned_data.get(f"model_{n}"))
        ]
