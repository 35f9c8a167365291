"""Dashboard and admin forms for keys and members. Money is entered in USD, stored in nano-USD."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.contrib.auth.models import AbstractBaseUser

from accounts.models import ApiKey, Membership, Organization
from billing.pricing import usd_to_nano
from ezat import money


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
    spend_cap_usd = forms.DecimalField(
        label="Monthly spend cap (USD)",
        min_value=Decimal(0),
        max_digits=18,
        decimal_places=9,
        required=False,
        help_text="Per calendar month (UTC). Empty = no cap.",
    )

    @classmethod
    def for_key(cls, key: ApiKey, data: Any = None) -> KeyLimitsForm:
        initial = {
            "name": key.name,
            "rpm_limit": key.rpm_limit,
            "max_concurrency": key.max_concurrency,
            "spend_cap_usd": usd_initial(key.spend_cap_nano),
        }
        return cls(data=data, initial=initial)

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


class OrgChoiceForm(forms.Form):
    """The org switcher: only orgs the user belongs to are valid choices."""

    org = forms.ModelChoiceField(queryset=Organization.objects.none())

    def __init__(self, *args: Any, user: AbstractBaseUser, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["org"].queryset = Organization.objects.filter(memberships__user=user)  # type: ignore[attr-defined]


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
