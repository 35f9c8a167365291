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
            saved = services.save_settings(
                org=org,
                low_balance_nano=form.low_balance_nano,
                key_cap_alerts=form.cleaned_data["key_cap_alerts"],
                email_enabled=form.cleaned_data["email_enabled"],
                webhook_url=form.cleaned_data["webhook_url"],
                updated_by=request.user.get_username(),
            )
            if row is None:  # the first save made the signing secret: show it, once
                request.session[SESSION_NEW_SECRET] = {
                    "org": org.pk,
                    "secret": saved.webhook_secret,
                }
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
            deliveries=list(selectors.deliveries(org)),
            new_secret=_take_new_secret(request, org.pk) if is_owner else None,
            signature_header=signing.SIGNATURE_HEADER,
            timestamp_header=signing.TIMESTAMP_HEADER,
        ),
        status=400 if request.method == "POST" else 200,
    )


@require_POST
@org_view(owner_only=True)
def rotate_webhook_secret(request: HttpRequest, membership: Membership) -> HttpResponse:
    row = services.rotate_secret(org=membership.org)
    request.session[SESSION_NEW_SECRET] = {"org": membership.org_id, "secret": row.webhook_secret}
    messages.success(request, "A new webhook signing secret is in use.")
    return redirect("dashboard:alerts")


# The signing secret is shown once, on the page right after it was made (the first save) or
# rotated, like an API key: it waits in the owner's server-side session for that one GET.
SESSION_NEW_SECRET = "alerts_new_webhook_secret"


def _take_new_secret(request: HttpRequest, org_id: int) -> str | None:
    pending = request.session.get(SESSION_NEW_SECRET)
    if not isinstance(pending, dict) or pending.get("org") != org_id:
        return None
    del request.session[SESSION_NEW_SECRET]
    return str(pending["secret"])


@require_POST
@org_view(owner_only=True)
def send_test_event(request: HttpRequest, membership: Membership) -> HttpResponse:
    try:
        delivery = services.send_test_event(org=membership.org)
    except services.NoWebhook:
        messages.error(request, "Save a webhook URL first, then send a test event.")
        return redirect("dashboard:alerts")
    if delivery.outcome == delivery.Outcome.OK:
        messages.success(
            request,
            f"Test event {delivery.delivery_id} delivered: HTTP {delivery.http_status} "
            f"in {delivery.latency_ms} ms.",
        )
    else:
        messages.error(request, f"Test event {delivery.delivery_id} failed: {delivery.error}.")
    return redirect("dashboard:alerts")
