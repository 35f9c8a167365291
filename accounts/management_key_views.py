"""Dashboard page for management keys (`ezat_mk_…`, keys for the management API): owners only.

A new key's secret is shown once, after a Post/Redirect/Get: it waits in the creator's session
for the one GET that shows it, so a reload shows nothing and mints nothing (like inference keys).
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts.models import ManagementKey, Membership
from accounts.services import create_management_key, revoke_management_key
from accounts.views import take_new_secret
from accounts.web import org_view, page

SESSION_NEW_MANAGEMENT_KEY = "ezat_new_management_key"


class ManagementKeyForm(forms.Form):
    name = forms.CharField(
        max_length=100, required=False, help_text="For you: which script or tool uses it."
    )


def _keys(membership: Membership) -> list[ManagementKey]:
    return list(
        ManagementKey.objects.filter(org=membership.org)
        .defer("key_hash")
        .select_related("created_by")
        .order_by("revoked_at", "-created_at")
    )


def _key_or_404(membership: Membership, key_id: int) -> ManagementKey:
    key = ManagementKey.objects.filter(org=membership.org, pk=key_id).first()
    if key is None:
        raise Http404("No such key.")
    return key


@never_cache
@require_http_methods(["GET", "POST"])
@org_view(owner_only=True)
def management_keys(request: HttpRequest, membership: Membership) -> HttpResponse:
    form = ManagementKeyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        key, secret = create_management_key(
            org=membership.org,
            name=form.cleaned_data["name"],
            created_by=request.user,  # type: ignore[arg-type]
        )
        request.session[SESSION_NEW_MANAGEMENT_KEY] = {"key_id": key.pk, "secret": secret}
        return redirect("dashboard:management-key-created", key_id=key.pk)
    context = page(request, membership, keys=_keys(membership), form=form)
    return render(request, "dashboard/management_keys.html", context)


@never_cache
@require_GET
@org_view(owner_only=True)
def management_key_created(
    request: HttpRequest, membership: Membership, key_id: int
) -> HttpResponse:
    key = _key_or_404(membership, key_id)
    secret = take_new_secret(request, SESSION_NEW_MANAGEMENT_KEY, key.pk, key.prefix)
    if secret is None:
        return redirect("dashboard:management-keys")
    context = page(request, membership, key=key, secret=secret)
    return render(request, "dashboard/management_key_created.html", context)


@require_POST
@org_view(owner_only=True)
def management_key_revoke(
    request: HttpRequest, membership: Membership, key_id: int
) -> HttpResponse:
    key = _key_or_404(membership, key_id)
    revoke_management_key(key=key)
    messages.success(request, f"Management key {key.prefix}… revoked; it stops working at once.")
    return redirect("dashboard:management-keys")
