"""Operator console for organizations: balance, usage this month and the "Grant credit" action.

Registered by billing (imported from `billing/admin.py`), not accounts: every column and the
action are billing's reads and writes, and accounts sits below billing. Money is never edited
here: `balance_nano` is read-only and credit goes through the "Grant credit" action (a ledger
entry + balance move in one transaction).
"""

from __future__ import annotations

import uuid
from decimal import Decimal

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet, Sum
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from accounts.models import Membership, Organization
from billing.dashboard_selectors import month_start
from billing.services import BillingError, grant_credit
from core.money import usd_to_nano
from core.money_fields import AmountField
from core.templatetags.dashboard import format_usd

MAX_GRANT_USD = Decimal(1_000_000)  # a typo guard, not a business limit: grant twice if needed


class GrantCreditForm(forms.Form):
    amount_usd = AmountField(
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
