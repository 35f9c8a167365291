"""The operator console's view of the gateway's live state: in-flight requests and cooldowns.

Catalog's `DeploymentAdmin` edits deployments; the "Live state" column reads the limiter and the
routing health board, which are the gateway's. Catalog sits below the gateway, so the column is
added here, by re-registering the deployment admin with it (admin modules are discovered in
INSTALLED_APPS order: catalog's before this one).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from asgiref.sync import async_to_sync
from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.http import HttpRequest
from django.utils import timezone
from django.utils.timesince import timesince

from catalog.admin import DeploymentAdmin
from catalog.models import Deployment
from gateway.selectors import AttemptError, last_attempt_errors

logger = logging.getLogger(__name__)

NOT_AVAILABLE = "n/a"


def live_states(deployment_ids: Sequence[int]) -> dict[int, str]:
    """In-flight requests and cooldown per deployment, or "n/a" when the gateway cannot say.

    Guarded on purpose: the limiter and the routing health board belong to the gateway and may
    be missing (not built yet, Redis down, nothing registered in this process). The operator
    console must still render, so every failure here degrades to "n/a" instead of a 500.
    """
    ids = list(deployment_ids)
    if not ids:
        return {}
    in_flight: dict[int, int] | None = None
    cooldowns: dict[int, float | None] | None = None
    try:
        from gateway.limits import get_limiter

        in_flight = async_to_sync(get_limiter().in_flight)(ids)
    except (ImportError, AttributeError, NotImplementedError):
        in_flight = None  # no limiter in this build yet
    except Exception:  # Redis down or similar: show n/a, keep the page up
        logger.warning("admin: in-flight counts unavailable", exc_info=True)
    try:
        from gateway.routing import cooldown_state

        cooldowns = cooldown_state(ids)
    except (ImportError, AttributeError, NotImplementedError):
        cooldowns = None
    except Exception:  # same reasoning as above
        logger.warning("admin: cooldown state unavailable", exc_info=True)
    now = time.time()
    states: dict[int, str] = {}
    for deployment_id in ids:
        flight = NOT_AVAILABLE if in_flight is None else str(in_flight.get(deployment_id, 0))
        if cooldowns is None:
            health = f"cooldown {NOT_AVAILABLE}"
        else:
            # cooldown_state gives the epoch second the cooldown ends (None = healthy).
            until = cooldowns.get(deployment_id)
            health = "healthy" if until is None or until <= now else f"cooling {until - now:.0f}s"
        states[deployment_id] = f"{flight} in flight · {health}"
    return states


def describe_error(error: AttemptError | None) -> str:
    """The last failed attempt in words with its age, or "—" when the recent log has none."""
    if error is None:
        return "—"
    return f"{error.describe()} ({timesince(error.at, timezone.now())} ago)"


def _insert_before(names: tuple[str, ...], name: str, before: str | None) -> tuple[str, ...]:
    if before is None or before not in names:
        return (*names, name)
    at = names.index(before)
    return (*names[:at], name, *names[at:])


admin.site.unregister(Deployment)


@admin.register(Deployment)
class LiveDeploymentAdmin(DeploymentAdmin):
    list_display = _insert_before(
        _insert_before(tuple(DeploymentAdmin.list_display), "live_state", None), "last_error", None
    )
    fields = _insert_before(
        _insert_before(tuple(DeploymentAdmin.fields), "live_state", "created_at"),
        "last_error",
        "created_at",
    )
    readonly_fields = _insert_before(
        _insert_before(tuple(DeploymentAdmin.readonly_fields), "live_state", "created_at"),
        "last_error",
        "created_at",
    )

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        changelist = super().get_changelist_instance(request)
        # One limiter/cooldown lookup and one request-log scan per page instead of one per row.
        states = live_states([d.pk for d in changelist.result_list])
        errors = last_attempt_errors(d.name for d in changelist.result_list)
        for deployment in changelist.result_list:
            deployment._live_state = states.get(deployment.pk, NOT_AVAILABLE)
            deployment._last_error = describe_error(errors.get(deployment.name))
        return changelist

    @admin.display(description="Last error")
    def last_error(self, obj: Deployment) -> str:
        """The newest failed attempt on it in the recent request log, with the operator's reason
        (the exception and its message, which callers never see)."""
        if obj.pk is None:
            return "—"
        cached = getattr(obj, "_last_error", None)
        if cached is not None:
            return str(cached)
        return describe_error(last_attempt_errors([obj.name]).get(obj.name))

    @admin.display(description="Live state")
    def live_state(self, obj: Deployment) -> str:
        if obj.pk is None:
            return "—"
        cached = getattr(obj, "_live_state", None)
        return cached if cached is not None else live_states([obj.pk]).get(obj.pk, NOT_AVAILABLE)
