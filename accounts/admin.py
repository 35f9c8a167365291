"""Operator console for organizations, members and keys.

Money is never edited here: `balance_nano` is read-only and credit goes through the "Grant
credit" action (a ledger entry + balance move in one transaction). Key hashes and secrets are
never rendered; keys are created where the secret can be shown once (dashboard, CLI).
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet, Sum
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from accounts.forms import usd_initial
from accounts.models import ApiKey, Invitation, ManagementKey, Membership, Organization
from accounts.services import (
    AccountsError,
    revoke_api_key,
    revoke_management_key,
    update_api_key_limits,
)
from billing.dashboard_selectors import month_start
from billing.pricing import usd_to_nano
from billing.services import BillingError, grant_credit
from billing.templatetags.dashboard import format_usd

MAX_GRANT_USD = Decimal(1_000_000)  # a typo guard, not a business limit: grant twice if needed


class GrantCreditForm(forms.Form):
    amount_usd = forms.DecimalField(
        label="Amount (USD)",
        min_value=Decimal("0.000000001"),
        max_value=MAX_GRANT_USD,
        max_digits=16,
        decimal_places=9,
    )
    memo = forms.CharField(
        max_length=500,
        help_text="Why: invoice number, promotion, goodwill… (shown to the customer).",
    )
    # One nonce per rendered form: a double-submitted grant reuses the ledger reference and is
    # refused by its unique constraint instead of crediting twice.
    nonce = forms.CharField(widget=forms.HiddenInput, max_length=32)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ("user",)
    fields = ("user", "role", "created_at")
    readonly_fields = ("created_at",)


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin):
    list_display = ("name", "balance_usd", "month_usage_usd", "max_concurrency", "created_at")
    search_fields = ("name",)
    fields = ("name", "max_concurrency", "balance_usd", "month_usage_usd", "created_at")
    readonly_fields = ("balance_usd", "month_usage_usd", "created_at")
    inlines = (MembershipInline,)
    actions = ("grant_credit_action",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Organization]:
        since = month_start()
        return (
            super()
            .get_queryset(request)
            .annotate(
                month_usage_nano=Sum(
                    "usage_records__cost_nano", filter=Q(usage_records__created_at__gte=since)
                )
            )
        )

    @admin.display(description="Balance", ordering="balance_nano")
    def balance_usd(self, obj: Organization) -> str:
        return format_usd(obj.balance_nano)

    @admin.display(description="Usage this month", ordering="month_usage_nano")
    def month_usage_usd(self, obj: Organization) -> str:
        return format_usd(getattr(obj, "month_usage_nano", None) or 0)

    @admin.action(description="Grant credit to the selected organizations…")
    def grant_credit_action(
        self, request: HttpRequest, queryset: QuerySet[Organization]
    ) -> HttpResponse | None:
        if "apply" in request.POST:
            form = GrantCreditForm(request.POST)
            if form.is_valid():
                return self._grant(request, queryset, form)
        else:
            form = GrantCreditForm(initial={"nonce": uuid.uuid4().hex})
        context = {
            **self.admin_site.each_context(request),
            "title": "Grant credit",
            "opts": self.model._meta,
            "orgs": queryset,
            "form": form,
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
            "action_name": "grant_credit_action",
        }
        return TemplateResponse(request, "admin/accounts/organization/grant_credit.html", context)

    def _grant(
        self, request: HttpRequest, queryset: QuerySet[Organization], form: GrantCreditForm
    ) -> None:
        amount = usd_to_nano(form.cleaned_data["amount_usd"])
        nonce = form.cleaned_data["nonce"]
        orgs = list(queryset)
        try:
            with transaction.atomic():  # all selected orgs or none
                for org in orgs:
                    grant_credit(
                        org=org,
                        amount_nano=amount,
                        memo=form.cleaned_data["memo"],
                        reference=f"admin-credit:{nonce}:{org.pk}",
                        created_by=request.user.get_username(),
                    )
        except IntegrityError:
            self.message_user(
                request,
                "This grant was already applied (submitted twice); nothing changed.",
                messages.WARNING,
            )
            return None
        except BillingError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return None
        for org in orgs:  # the admin's "Recent actions" and each org's history list grants
            self.log_change(
                request, org, f"Granted {format_usd(amount)} credit: {form.cleaned_data['memo']}"
            )
        names = ", ".join(o.name for o in orgs)
        self.message_user(request, f"Granted {format_usd(amount)} to {names}.", messages.SUCCESS)
        return None


class ApiKeyAdminForm(forms.ModelForm):
    spend_cap_usd = forms.DecimalField(
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
        if obj.spend_cap_nano is None:
            return "none"
        return f"{format_usd(obj.spend_cap_nano)} / {obj.spend_cap_period}"

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
