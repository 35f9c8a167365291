"""A credit grant reaches the live limiter through the listener the gateway app hands down
(billing sits below the gateway and does not import it: docs/design.md, "Dependencies between the apps")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from billing import services
from gateway.limits import notify_credit
from tests.billing.factories import make_org


def test_the_gateway_app_hands_billing_its_credit_listener() -> None:
    assert services._credit_listener is notify_credit


@pytest.mark.django_db
def test_a_grant_notifies_the_listener_once_after_commit(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    calls: list[tuple[int, int]] = []
    previous = services._credit_listener
    services.set_credit_listener(lambda org_id, amount: calls.append((org_id, amount)))
    try:
        org = make_org()
        with django_capture_on_commit_callbacks(execute=False) as pending:
            services.grant_credit(org=org, amount_nano=7_000, memo="listener test")
        assert calls == []  # not before the grant commits
        for callback in pending:
            callback()
        assert calls == [(org.pk, 7_000)]
    finally:
        services.set_credit_listener(previous)
