"""Audit lines: one JSON log line (logger `ezat.audit`) for every key create/revoke/update,
member change and credit grant, with the actor, whichever door it came through.

The actor is whoever the current web request is signed in as (dashboard, admin, management API:
set by `AuditActorMiddleware`; DRF hands its authenticated user to the Django request), else an
explicit `actor=`, else the operating-system user of a CLI command.
"""

from __future__ import annotations

import getpass
import logging
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from django.http import HttpRequest, HttpResponse

logger = logging.getLogger("ezat.audit")

_request_var: ContextVar[HttpRequest | None] = ContextVar("ezat_audit_request", default=None)


def current_actor() -> str:
    request = _request_var.get()
    if request is not None:
        user = getattr(request, "user", None)
        if user is not None and getattr(user, "is_authenticated", False):
            name = getattr(user, "get_username", lambda: str(user))()
            return f"{'admin' if request.path.startswith('/admin/') else 'web'}:{name}"
        return "web:anonymous"
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no passwd entry (containers)
        return "cli:unknown"


def audit(action: str, *, actor: str | None = None, **fields: Any) -> None:
    logger.info(action, extra={"audit": action, "actor": actor or current_actor(), **fields})


class AuditActorMiddleware:
    """Remembers the request for `current_actor()` (read at audit time, after authentication,
    so a management key authenticated by DRF inside the view is the actor too)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = _request_var.set(request)
        try:
            return self.get_response(request)
        finally:
            _request_var.reset(token)
