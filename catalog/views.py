from __future__ import annotations

import orjson
from django.http import HttpRequest, HttpResponse

from catalog.selectors import public_catalog
from catalog.snapshot import holder


async def models_catalog(request: HttpRequest) -> HttpResponse:
    """GET /api/models — public, no key: capabilities and prices as decimal strings."""
    snapshot = await holder.get()
    return HttpResponse(orjson.dumps(public_catalog(snapshot)), content_type="application/json")
