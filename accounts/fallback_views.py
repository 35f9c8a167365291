"""Dashboard pages for an org's model fallback chains (issue 20).

Members see, per model, the org's chain and the catalog's suggestion; owners set a chain, start
from the suggestion (filled into the form, applied only when saved) or turn it off. ezat/auto's
row is the org's own chain for it (the catalog's until the owner sets one). Every gateway process
applies a change within EZAT_KEY_CACHE_TTL seconds.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from accounts import selectors
from accounts.forms import FallbackChainForm
from accounts.models import Membership
from accounts.services import AccountsError, clear_fallbacks, set_fallbacks
from accounts.web import org_view, page
from catalog.chains import AUTO_MODEL_ID, AUTO_MODEL_NAME
from catalog.selectors import model_choices, suggested_chain_rows


def _rows(membership: Membership) -> list[dict[str, object]]:
    chains = {p.model_id: p for p in selectors.org_fallbacks(membership.org)}
    suggestions = {s.model: s for s in suggested_chain_rows()}
    models = [(AUTO_MODEL_ID, AUTO_MODEL_NAME), *model_choices()]
    return [
        {
            "id": model_id,
            "label": label,
            "chain": chains.get(model_id),
            "suggestion": suggestions.get(model_id),
        }
        for model_id, label in models
    ]


@require_GET
@org_view()
def fallbacks_list(request: HttpRequest, membership: Membership) -> HttpResponse:
    return render(
        request,
        "dashboard/fallbacks.html",
        page(request, membership, rows=_rows(membership), auto=AUTO_MODEL_ID),
    )


@require_http_methods(["GET", "POST"])
@org_view(owner_only=True)
def fallback_edit(request: HttpRequest, membership: Membership, model: str) -> HttpResponse:
    choices = model_choices()
    names = dict(choices)
    if model != AUTO_MODEL_ID and model not in names:
        raise Http404("No such model.")
    suggestion = next((s for s in suggested_chain_rows() if s.model == model), None)
    current = selectors.org_fallback(membership.org, model)
    if request.method == "POST" and "off" in request.POST:
        clear_fallbacks(org=membership.org, model=model)
        messages.success(request, f"Fallbacks of {model} are off; this applies within seconds.")
        return redirect("dashboard:fallbacks")
    if request.method == "POST":
        form = FallbackChainForm(request.POST, choices=[c for c in choices if c[0] != model])
        if form.is_valid():
            try:
                set_fallbacks(
                    org=membership.org,
                    model=model,
                    fallbacks=list(form.chain),
                    actor=request.user.get_username(),
                )
            except AccountsError as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Chain of {model} saved; it applies within seconds.")
                return redirect("dashboard:fallbacks")
    else:
        # The catalog's suggestion fills the form only when asked; it is never saved unasked.
        start = (
            suggestion.model_ids
            if request.GET.get("suggested") and suggestion is not None
            else (current.fallbacks if current is not None else [])
        )
        form = FallbackChainForm.for_chain(
            list(start), choices=[c for c in choices if c[0] != model]
        )
    context = page(
        request,
        membership,
        form=form,
        model=model,
        label=AUTO_MODEL_NAME if model == AUTO_MODEL_ID else names[model],
        suggestion=suggestion,
        current=current,
        auto=model == AUTO_MODEL_ID,
    )
    return render(request, "dashboard/fallback_form.html", context)
