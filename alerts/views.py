"""The alerts page: settings (owners change them) and the org's alert history."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from accounts.models import Membership
from accounts.web import org_view, page
from alerts import selectors, services, signing
from alerts.forms import AlertSettingsForm


@require_http_methods(["GET", "POST"])
@org_view()
def alerts_page(request: HttpRequest, membership: Membership) -> HttpResponse:
    org = membership.org
    row = selectors.org_settings(org)
    is_owner = membership.role == Membership.Role.OWNER
    if request.method == "POST":
        if not is_owner:
            return render(request, "403.html", status=403)
        form = AlertSettingsForm.for_settings(row, data=request.POST)
        if form.is_valid():
            services.save_settings(
                org=org,
                low_balance_nano=form.low_balance_nano,
                key_cap_alerts=form.cleaned_data["key_cap_alerts"],
                email_enabled=form.cleaned_data["email_enabled"],
                webhook_url=form.cleaned_data["webhook_url"],
                updated_by=request.user.get_username(),
            )
            messages.success(request, "Alert settings saved.")
            return redirect("dashboard:alerts")
    else:
        form = AlertSettingsForm.for_settings(row)
    return render(
        request,
        "dashboard/alerts.html",
        page(
            request,
            membership,
            form=form,
            settings_row=row,
            events=list(selectors.org_history(org)),
            signature_header=signing.SIGNATURE_HEADER,
            timestamp_header=signing.TIMESTAMP_HEADER,
        ),
        status=400 if request.method == "POST" else 200,
    )


@require_POST
@org_view(owner_only=True)
def rotate_webhook_secret(request: HttpRequest, membership: Membership) -> HttpResponse:
    services.rotate_secret(org=membership.org)
    messages.success(request, "A new webhook signing secret is in use.")
    return redirect("dashboard:alerts")
