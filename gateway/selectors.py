"""Reads of stored responses (synchronous ORM; the API handlers call them in a thread)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from gateway import nul_escape
from gateway.models import StoredResponse


def stored_response(org_id: int, response_id: str) -> dict[str, Any] | None:
    """The response object as the client saw it, if stored for this org and not expired."""
    row = (
        StoredResponse.objects.filter(
            org_id=org_id, response_id=response_id, expires_at__gt=timezone.now()
        )
        .values_list("response", flat=True)
        .first()
    )
    row = nul_escape.decode(row)
    return row if isinstance(row, dict) else None


def stored_contexts(org_id: int, response_ids: list[str]) -> dict[str, dict[str, Any]]:
    """response id -> its context (`items`, `output`), for this org's unexpired responses."""
    if not response_ids:
        return {}
    rows = StoredResponse.objects.filter(
        org_id=org_id, response_id__in=response_ids, expires_at__gt=timezone.now()
    ).values_list("response_id", "context")
    decoded = ((rid, nul_escape.decode(ctx)) for rid, ctx in rows)
    return {rid: ctx for rid, ctx in decoded if isinstance(ctx, dict)}
