"""The Playground page and its run endpoint. Thin: see relay.py and services.py.

CSRF: the run endpoint is a POST protected by Django's CSRF middleware (the page sends the
token in X-CSRFToken); tenancy: `org_view` resolves the org from the session and checks
membership; the key used is the session's own Playground key of that org. Runs are for owners,
like key creation: a run mints a key and spends the org's balance.
"""

from __future__ import annotations

import orjson
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from accounts.models import Membership
from accounts.web import org_view, page
from playground import relay, services
from playground.selectors import playground_models


@require_GET
@org_view()
def playground_page(request: HttpRequest, membership: Membership) -> HttpResponse:
    return render(
        request,
        "dashboard/playground.html",
        page(
            request,
            membership,
            models=playground_models(),
            levels=relay.REASONING_LEVELS[1:],
            api_base=public_base(request),
        ),
    )


def public_base(request: HttpRequest) -> str:
    """The base URL the page's code samples show: text for the user, never fetched by the
    server (the relay goes to `relay.gateway_url`)."""
    configured = str(settings.EZAT_PUBLIC_URL or "").rstrip("/")
    return configured or f"{request.scheme}://{request.get_host()}"


def relay_base(request: HttpRequest) -> str:
    # The ASGI scope's server is the socket the connection arrived on, not anything the client
    # sent; a request without one (not served over ASGI) has only the configured address.
    server = getattr(request, "scope", {}).get("server")
    return relay.gateway_url(str(settings.EZAT_PLAYGROUND_GATEWAY_URL or ""), server)


@never_cache
@require_POST
@org_view(owner_only=True)
def playground_run(request: HttpRequest, membership: Membership) -> HttpResponse:
    try:
        body = relay.run_body(orjson.loads(request.body or b"null"))
    except orjson.JSONDecodeError:
        return JsonResponse({"error": {"message": "the body must be JSON"}}, status=400)
    except relay.PlaygroundInputError as exc:
        return JsonResponse({"error": {"message": str(exc)}}, status=400)
    try:
        url = relay_base(request) + "/openai/v1/responses"
    except relay.RelayAddressUnknown as exc:
        return JsonResponse({"error": {"message": str(exc)}}, status=503)
    secret = services.session_secret(request.session, membership.org, request.user)
    response = StreamingHttpResponse(
        relay.relay(url, secret, body, membership.org_id), content_type="text/event-stream"
    )
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"
    return response
