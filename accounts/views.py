"""Dashboard pages for keys, members and the org switcher.

The tenancy guard (`org_view`) and the layout context (`page`) every page uses are in
`accounts/web.py`.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import F
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts import selectors
from accounts.forms import InviteForm, KeyCreateForm, KeyLimitsForm, MemberRoleForm
from accounts.invitations import public_base_url
from accounts.models import ApiKey, Membership
from accounts.services import (
    AccountsError,
    create_api_key,
    invite_member,
    remove_member,
    revoke_api_key,
    revoke_invitation,
    set_api_key_disabled,
    set_member_role,
    update_api_key_limits,
)
from accounts.web import SESSION_ORG, org_view, page
from catalog.selectors import model_choices

# The secret of a key just created, between the POST and the page that shows it (Post/Redirect/
# Get): popped by the first GET, so a reload shows nothing and mints nothing.
SESSION_NEW_KEY = "ezat_new_key"


def _safe_next(request: HttpRequest, fallback: str) -> str:
    target = request.POST.get("next") or ""
    ok = url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    if not ok or not target:
        return fallback
    # Keep the range the page shows (issue 34: switching org dropped ?days=), but nothing that
    # names the old org's things (a key, a model filter, a page, a request id), and never a
    # `?org=`, or the switch would be undone.
    path, _, query = target.partition("?")
    kept = [(k, v) for k, v in parse_qsl(query) if k in KEPT_ON_SWITCH]
    return f"{path}?{urlencode(kept)}" if kept else path


KEPT_ON_SWITCH = frozenset(
    {"days", "hours", "start", "end", "split", "status", "sort", "since", "until"}
)


@login_required
@require_POST
def switch_org(request: HttpRequest) -> HttpResponse:
    membership = selectors.membership_for(request.user, request.POST.get("org"))
    if membership is None:
        raise Http404("No such organization.")
    request.session[SESSION_ORG] = membership.org_id
    return HttpResponseRedirect(_safe_next(request, reverse("dashboard:home")))


# --- Keys ---------------------------------------------------------------------------------------


def _key_or_404(membership: Membership, key_id: int) -> ApiKey:
    key = selectors.org_key(membership.org, key_id)
    if key is None:
        raise Http404("No such key.")
    return key


@require_GET
@org_view()
def keys_list(request: HttpRequest, membership: Membership) -> HttpResponse:
    # The spend annotations read billing's usage records (billing depends on accounts).
    from accounts.api.selectors import api_keys_for_org

    keys = list(
        api_keys_for_org(membership.org)
        .defer("key_hash")
        .order_by(F("revoked_at").asc(nulls_first=True), "-created_at")
    )
    return render(request, "dashboard/keys.html", page(request, membership, keys=keys))


@never_cache
@require_http_methods(["GET", "POST"])
@org_view(owner_only=True)
def key_create(request: HttpRequest, membership: Membership) -> HttpResponse:
    form = KeyCreateForm(request.POST or None, model_choices=model_choices())
    if request.method == "POST" and form.is_valid():
        try:
            new = create_api_key(
                org=membership.org,
                name=form.cleaned_data["name"],
                rpm_limit=form.cleaned_data["rpm_limit"],
                max_concurrency=form.cleaned_data["max_concurrency"],
                spend_cap_nano=form.spend_cap_nano,
                spend_cap_period=form.cleaned_data["spend_cap_period"],
                allowed_models=form.cleaned_data["allowed_models"],
                allowed_ips=form.cleaned_data["allowed_ips"],
                expires_at=form.cleaned_data["expires_at"],
                created_by=request.user,  # type: ignore[arg-type]
            )
        except AccountsError as exc:
            _form_error(form, exc)
        else:
            # Post/Redirect/Get: a reload of the result page must not mint another key. The
            # secret waits in the creator's own session (server-side, never in a URL or a
            # cookie) for the one GET that shows it, which pops it.
            request.session[SESSION_NEW_KEY] = {"key_id": new.key.pk, "secret": new.secret}
            return redirect("dashboard:key-created", key_id=new.key.pk)
    return render(request, "dashboard/key_form.html", page(request, membership, form=form))


@never_cache
@require_GET
@org_view(owner_only=True)
def key_created(request: HttpRequest, membership: Membership, key_id: int) -> HttpResponse:
    """Shows a new key's secret once (no-store); a reload finds it gone and says so."""
    key = _key_or_404(membership, key_id)
    secret = take_new_secret(request, SESSION_NEW_KEY, key.pk, key.prefix)
    if secret is None:
        return redirect("dashboard:keys")
    context = page(request, membership, key=key, secret=secret)
    return render(request, "dashboard/key_created.html", context)


def take_new_secret(request: HttpRequest, session_key: str, key_id: int, prefix: str) -> str | None:
    """A new key's secret, left in the session by its creation's redirect, taken out so that it
    is shown once (API keys and management keys alike). None, with a message saying why, when it
    is gone; another key's pending secret stays for its own page."""
    pending = request.session.pop(session_key, None)
    if isinstance(pending, dict) and pending.get("key_id") == key_id:
        return str(pending["secret"])
    if pending is not None:
        request.session[session_key] = pending
    messages.info(
        request,
        f"The secret of {prefix}… was shown once and cannot be shown again. "
        "If you did not copy it, revoke the key and create another.",
    )
    return None


@require_http_methods(["GET", "POST"])
@org_view(owner_only=True)
def key_edit(request: HttpRequest, membership: Membership, key_id: int) -> HttpResponse:
    key = _key_or_404(membership, key_id)
    if not key.is_active:
        messages.error(request, "A revoked key cannot be changed.")
        return redirect("dashboard:keys")
    form = KeyLimitsForm.for_key(key, request.POST or None, model_choices=model_choices())
    if request.method == "POST" and form.is_valid():
        changed = "expires_at" in form.changed_data
        try:
            update_api_key_limits(
                key=key,
                rpm_limit=form.cleaned_data["rpm_limit"],
                max_concurrency=form.cleaned_data["max_concurrency"],
                spend_cap_nano=form.spend_cap_nano,
                name=form.cleaned_data["name"],
                spend_cap_period=form.cleaned_data["spend_cap_period"],
                allowed_models=form.cleaned_data["allowed_models"],
                allowed_ips=form.cleaned_data["allowed_ips"],
                expires_at=form.cleaned_data["expires_at"] if changed else key.expires_at,
            )
        except AccountsError as exc:
            _form_error(form, exc)
        else:
            messages.success(request, f"Limits of {key.prefix}… saved; they apply within seconds.")
            return redirect("dashboard:keys")
    return render(request, "dashboard/key_form.html", page(request, membership, form=form, key=key))


def _form_error(form: forms.Form, exc: AccountsError) -> None:
    """A service's refusal on the field it names (if the form has it), else on the form."""
    form.add_error(exc.field if exc.field in form.fields else None, str(exc))


@require_POST
@org_view(owner_only=True)
def key_disable(request: HttpRequest, membership: Membership, key_id: int) -> HttpResponse:
    return _set_disabled(request, membership, key_id, disabled=True)


@require_POST
@org_view(owner_only=True)
def key_enable(request: HttpRequest, membership: Membership, key_id: int) -> HttpResponse:
    return _set_disabled(request, membership, key_id, disabled=False)


def _set_disabled(
    request: HttpRequest, membership: Membership, key_id: int, *, disabled: bool
) -> HttpResponse:
    key = _key_or_404(membership, key_id)
    try:
        set_api_key_disabled(key=key, disabled=disabled)
    except AccountsError as exc:
        messages.error(request, str(exc))
    else:
        if disabled:
            messages.success(
                request, f"Key {key.prefix}… disabled; calls with it are refused within seconds."
            )
        else:
            messages.success(request, f"Key {key.prefix}… enabled again; it works within seconds.")
    return redirect("dashboard:keys")


@require_POST
@org_view(owner_only=True)
def key_revoke(request: HttpRequest, membership: Membership, key_id: int) -> HttpResponse:
    key = _key_or_404(membership, key_id)
    revoke_api_key(key=key)
    messages.success(request, f"Key {key.prefix}… revoked; it stops working within seconds.")
    return redirect("dashboard:keys")


# --- Members --------------------------------------------------------------------------------------


def _members_page(
    request: HttpRequest, membership: Membership, form: InviteForm, status: int = 200
) -> HttpResponse:
    is_owner = membership.role == Membership.Role.OWNER
    context = page(
        request,
        membership,
        members=selectors.org_members(membership.org),
        invitations=selectors.org_pending_invitations(membership.org) if is_owner else [],
        form=form,
        roles=Membership.Role.choices,
    )
    return render(request, "dashboard/members.html", context, status=status)


@require_GET
@org_view()
def members_list(request: HttpRequest, membership: Membership) -> HttpResponse:
    return _members_page(request, membership, InviteForm())


@require_POST
@org_view(owner_only=True)
def member_invite(request: HttpRequest, membership: Membership) -> HttpResponse:
    """Invite by e-mail. Every valid address gets the same answer (a redirect and the same
    message), whether it has an account, is a member already, or is a staff account."""
    form = InviteForm(request.POST)
    if form.is_valid():
        try:
            invitation = invite_member(
                org=membership.org,
                email=form.cleaned_data["email"],
                role=form.cleaned_data["role"],
                invited_by=request.user.get_username(),
                base_url=public_base_url(request),
            )
        except AccountsError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(
                request,
                f"Invitation sent to {invitation.email}. It can be accepted for 7 days; "
                "they join only when they accept.",
            )
            return redirect("dashboard:members")
    return _members_page(request, membership, form, status=400)


@require_POST
@org_view(owner_only=True)
def invitation_revoke(
    request: HttpRequest, membership: Membership, invitation_id: int
) -> HttpResponse:
    invitation = selectors.org_invitation(membership.org, invitation_id)
    if invitation is None:
        raise Http404("No such invitation.")
    revoke_invitation(invitation=invitation)
    messages.success(request, f"Invitation of {invitation.email} withdrawn.")
    return redirect("dashboard:members")


@require_POST
@org_view(owner_only=True)
def member_role(request: HttpRequest, membership: Membership, member_id: int) -> HttpResponse:
    target = selectors.org_members(membership.org).filter(pk=member_id).first()
    if target is None:
        raise Http404("No such member.")
    form = MemberRoleForm(
        request.POST, membership=target, owners=selectors.owner_count(membership.org)
    )
    if form.is_valid():
        try:
            set_member_role(membership=target, role=form.cleaned_data["role"])
        except AccountsError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"{target.user} is now {form.cleaned_data['role']}.")
    else:
        messages.error(request, " ".join(form.errors.get("role", ["Invalid role."])))
    return redirect("dashboard:members")


@require_http_methods(["GET", "POST"])
@org_view(owner_only=True)
def member_remove(request: HttpRequest, membership: Membership, member_id: int) -> HttpResponse:
    """GET (or a POST without `confirm`) asks first; only a POST with `confirm=yes` removes.

    The confirmation is a page of its own, so it works without JavaScript.
    """
    target = selectors.org_members(membership.org).filter(pk=member_id).first()
    if target is None:
        raise Http404("No such member.")
    if request.method != "POST" or request.POST.get("confirm") != "yes":
        context = page(request, membership, target=target, is_self=target.pk == membership.pk)
        return render(request, "dashboard/member_remove.html", context)
    try:
        remove_member(membership=target)
    except AccountsError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{target.user} removed from {membership.org}.")
    return redirect("dashboard:members")
