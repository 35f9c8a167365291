from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from accounts import services as accounts
from accounts.models import Organization
from billing.services import grant_credit
from ezat.celery import app

USD = 1_000_000_000


@pytest.fixture
def eager(settings: Any) -> Iterator[None]:
    """Tasks run in-process (what the embedded default does without Redis); deliveries are
    the same code a worker runs (tests/alerts/test_worker.py runs a real worker)."""
    settings.EZAT_WEBHOOK_ALLOW_LOOPBACK = True
    settings.EZAT_ALERT_RETRY_BASE_SECONDS = 0.01
    old = app.conf.task_always_eager, app.conf.task_eager_propagates
    # Not propagated: an eager retry re-runs the task inline and then raises Retry to the caller.
    app.conf.task_always_eager, app.conf.task_eager_propagates = True, False
    yield
    app.conf.task_always_eager, app.conf.task_eager_propagates = old


@pytest.fixture
def owner() -> Any:
    return get_user_model().objects.create_user(
        "alert-owner", email="owner@example.test", password="x-pass-12345"
    )


@pytest.fixture
def org(owner: Any) -> Organization:
    org = accounts.create_org(name="Alerting Co")
    accounts.add_member(org=org, user=owner, role="owner")
    grant_credit(org=org, amount_nano=10 * USD, memo="credit")
    org.refresh_from_db()
    return org
