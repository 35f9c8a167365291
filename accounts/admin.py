"""Operator console for members and keys.

The Organization admin (balance, usage this month, the "Grant credit" action) is billing's:
`billing/org_admin.py`, so accounts imports nothing of billing. Key hashes and secrets are never
rendered; keys are created where the secret can be shown once (dashboard, CLI).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from accounts.forms import usd_initial
from accounts.models import ApiKey, Invitation, ManagementKey, Membership
from accounts.services import (
    AccountsError,
    revoke_api_key,
    revoke_management_key,
    update_api_key_limits,
)
from core import money
from core.money import usd_to_nano
from core.money_fields import AmountField


class ApiKeyAdminForm(forms.ModelForm):
    spend_cap_usd = AmountField(
        label="Spend cap (USD)",
        min_value=Decimal(0),
        max_digits=18,
        decimal_places=9,
        required=False,
        help_text="Per the cap period below. Empty = no cap.",
    )

    class Meta:
        model = ApiKey
        fields = ("name", "rpm_limit", "max_concurrency", "spend_cap_period")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["spend_cap_period"].required = False  # absent: kept as it is
        if self.instance.pk:
            self.initial["spend_cap_usd"] = usd_initial(self.instance.spend_cap_nano)


class KeyStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("active", "Active"), ("revoked", "Revoked")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "active":
            return queryset.filter(revoked_at__isnull=True)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    form = ApiKeyAdminForm
    list_display = (
        "prefix_display",
        "name",
        "org",
        "rpm_limit",
        "max_concurrency",
        "spend_cap_usd",
        "last_used_at",
        "status",
    )
    list_filter = (KeyStatusFilter,)
    list_select_related = ("org",)
    search_fields = ("prefix", "name", "org__name")
    # `key_hash` is in neither list: the admin has nothing it could leak.
    fields = (
        "org",
        "prefix_display",
        "name",
        "rpm_limit",
        "max_concurrency",
        "spend_cap_usd",
        "spend_cap_period",
        "allowed_models",
        "expires_at",
        "disabled_at",
        "created_at",
        "created_by",
        "last_used_at",
        "revoked_at",
    )
    # The allow-list, expiry and disabling are the org owners' (dashboard, management API).
    readonly_fields = (
        "org",
        "prefix_display",
        "allowed_models",
        "expires_at",
        "disabled_at",
        "created_at",
        "created_by",
        "last_used_at",
        "revoked_at",
    )
    actions = ("revoke_keys",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiKey]:
        return super().get_queryset(request).defer("key_hash")

    def has_add_permission(self, request: HttpRequest) -> bool:
        # The secret can only be shown at creation: create keys on the dashboard or with
        # `manage.py create_key`, which show it once.
        return False

    def has_delete_permission(self, request: HttpRequest, obj: ApiKey | None = None) -> bool:
        return False  # revoke instead: usage history keeps pointing at the key

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> tuple:
        if obj is not None and obj.revoked_at is not None:
            return (
                *self.readonly_fields,
                "name",
                "rpm_limit",
                "max_concurrency",
                "spend_cap_usd",
                "spend_cap_period",
            )
        return self.readonly_fields

    @admin.display(description="Key", ordering="prefix")
    def prefix_display(self, obj: ApiKey) -> str:
        return f"{obj.prefix}…"

    @admin.display(description="Spend cap", ordering="spend_cap_nano")
    def spend_cap_usd(self, obj: ApiKey) -> str:
        return money.usd_cap(obj.spend_cap_nano, obj.spend_cap_period)

    @admin.display(description="Status")
    def status(self, obj: ApiKey) -> str:
        state = obj.state
        return f"revoked {obj.revoked_at:%Y-%m-%d %H:%M}" if state == "revoked" else state

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if obj.revoked_at is not None:
            return  # every field is read-only on a revoked key
        cap = form.cleaned_data.get("spend_cap_usd")
        try:
            update_api_key_limits(
                key=obj,
                rpm_limit=form.cleaned_data.get("rpm_limit"),
                spend_cap_nano=None if cap is None else usd_to_nano(cap),
                name=form.cleaned_data.get("name", obj.name),
                max_concurrency=form.cleaned_data.get("max_concurrency"),
                spend_cap_period=form.cleaned_data.get("spend_cap_period") or obj.spend_cap_period,
            )
        except AccountsError as exc:  # the form validated the same rules; belt and braces
            self.message_user(request, str(exc), messages.ERROR)

    @admin.action(description="Revoke the selected keys")
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        count = 0
        for key in queryset.filter(revoked_at__isnull=True):
            revoke_api_key(key=key)
            count += 1
        self.message_user(request, f"Revoked {count} key(s); they stop working within seconds.")


@admin.register(ManagementKey)
class ManagementKeyAdmin(admin.ModelAdmin):
    list_display = ("prefix", "name", "org", "created_at", "last_used_at", "revoked_at")
    list_select_related = ("org",)
    search_fields = ("prefix", "name", "org__name")
    fields = ("org", "prefix", "name", "created_by", "created_at", "last_used_at", "revoked_at")
    readonly_fields = fields
    actions = ("revoke_management_keys",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[ManagementKey]:
        return super().get_queryset(request).defer("key_hash")

    @admin.action(description="Revoke the selected management keys")
    def revoke_management_keys(
        self, request: HttpRequest, queryset: QuerySet[ManagementKey]
    ) -> None:
        count = 0
        for key in queryset.filter(revoked_at__isnull=True):
            revoke_management_key(key=key)
            count += 1
        self.message_user(request, f"Revoked {count} management key(s).")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "org", "role", "created_at")
    list_filter = ("role",)
    list_select_related = ("user", "org")
    search_fields = ("user__username", "user__email", "org__name")
    raw_id_fields = ("user", "org")


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    """Read-only: invitations are an owner's and an invitee's business; operators look (and
    may delete one), they never create or edit them."""

    list_display = ("email", "org", "role", "invited_by", "created_at", "expires_at", "state")
    list_select_related = ("org",)
    search_fields = ("email", "org__name", "invited_by")
    readonly_fields = (
        "org",
        "email",
        "role",
        "invited_by",
        "created_at",
        "expires_at",
        "accepted_at",
        "accepted_by",
        "revoked_at",
    )

    @admin.display(description="state")
    def state(self, obj: Invitation) -> str:
        if obj.accepted_at is not None:
            return "accepted"
        if obj.revoked_at is not None:
            return "withdrawn"
        return "pending"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
