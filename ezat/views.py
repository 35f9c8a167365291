"""Answers Django gives on paths that belong to the gateway.

Under ASGI (`make run`, uvicorn) the inference APIs never reach Django: ezat/asgi.py hands
`/v1/…` and `/openai/v1/…` to the gateway first. Under `manage.py runserver` (WSGI) they would
reach Django and get its HTML 404, with no hint why; this says what to run instead, in an error
shape both the Anthropic and the OpenAI SDKs read.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

MESSAGE = (
    "The inference APIs (/v1/…, /openai/v1/…) are served by the ASGI gateway, not by "
    "`manage.py runserver`: start it with `make run`, or "
    "`uvicorn ezat.asgi:application --port 8000`."
)


@csrf_exempt
def api_needs_asgi(request: HttpRequest, rest: str = "") -> JsonResponse:
    return JsonResponse(
        {
            "type": "error",
            "error": {
                "type": "not_found_error",
                "code": "asgi_server_required",
                "message": MESSAGE,
            },
        },
        status=404,
    )
