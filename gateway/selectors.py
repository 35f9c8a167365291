"""Reads of stored responses (synchronous ORM; the API handlers call them in a thread), and the
admin's last failed attempt per deployment (from the request log)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
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


# How far back the admin looks for a deployment's last failed attempt: the newest request-log
# rows only (indexed on created_at), so the page costs the same at any history size. A
# deployment whose last failure is older than this many requests shows none.
LAST_ERROR_SCAN = 2000
NOT_FAILURES = ("ok", "full", "skipped", "no_deployment")


@dataclass(frozen=True)
class AttemptError:
    at: datetime
    outcome: str
    status: int | None
    reason: str

    def describe(self) -> str:
        why = self.reason or (f"HTTP {self.status}" if self.status else "")
        return f"{self.outcome}: {why}" if why else self.outcome


def last_attempt_errors(
    names: Iterable[str], scan: int = LAST_ERROR_SCAN
) -> dict[str, AttemptError]:
    """deployment name -> its newest failed attempt among the last `scan` logged requests."""
    from billing.models import RequestLog

    wanted = set(names)
    found: dict[str, AttemptError] = {}
    rows = RequestLog.objects.order_by("-created_at").values_list("created_at", "attempts")
    for created_at, attempts in rows[:scan]:
        for attempt in attempts if isinstance(attempts, list) else []:
            name = attempt.get("deployment") if isinstance(attempt, dict) else None
            outcome = str(attempt.get("outcome", "")) if name else ""
            if name in wanted and name not in found and outcome not in NOT_FAILURES:
                found[name] = AttemptError(
                    created_at, outcome, attempt.get("status"), str(attempt.get("reason", ""))
                )
        if len(found) == len(wanted):
            break
    return found
