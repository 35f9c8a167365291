"""Issue 34: the webhook's "send test event" button, its delivery log (status, latency,
retries) and a signing secret shown once, when it is made or rotated."""

from __future__ import annotations

import re
import time
from typing import Any

import orjson
import pytest
from django.test import Client

from accounts.models import Organization
from alerts import services, signing
from alerts.models import AlertEvent, AlertSettings, WebhookDelivery
from tests.alerts.conftest import USD
from tests.alerts.receiver import webhook_receiver

pytestmark = pytest.mark.django_db


def _owner_client(owner: Any) -> Client:
    client = Client()
    client.force_login(owner)
    return client


def test_retries_are_logged_with_status_and_latency(
    org: Organization, eager: None, django_capture_on_commit_callbacks: Any
) -> None:
    with webhook_receiver(statuses=[500, 503, 200]) as receiver:
        with django_capture_on_commit_callbacks(execute=True):
            services.save_settings(
                org=org, low_balance_nano=20 * USD, key_cap_alerts=False, email_enabled=False,
                webhook_url=receiver.url, updated_by="t",
            )  # fmt: skip
        assert receiver.count() == 3
    event = AlertEvent.objects.get(org=org)
    log = list(WebhookDelivery.objects.filter(org=org).order_by("attempt"))
    assert [(d.attempt, d.http_status, d.outcome) for d in log] == [
        (1, 500, "failed"), (2, 503, "failed"), (3, 200, "ok"),
    ]  # fmt: skip
    assert all(d.event_id == event.pk and d.delivery_id == f"alert_{event.pk}" for d in log)
    assert log[0].error == "receiver answered HTTP 500"
    assert all(d.latency_ms >= 0 for d in log)


def test_test_event_button_sends_a_signed_event_and_logs_it(
    org: Organization, owner: Any, eager: None
) -> None:
    client = _owner_client(owner)
    assert client.post("/dashboard/alerts/test/", follow=True).status_code == 200  # no URL yet
    assert not WebhookDelivery.objects.exists()
    with webhook_receiver(statuses=[204, 500]) as receiver:
        client.post("/dashboard/alerts/", {"webhook_url": receiver.url})
        page = client.post("/dashboard/alerts/test/", follow=True).content.decode()
        assert receiver.count() == 1
        got = receiver.requests[0]
        secret = AlertSettings.objects.get(org=org).webhook_secret
        assert signing.verify(
            secret, got.body, got.headers[signing.TIMESTAMP_HEADER],
            got.headers[signing.SIGNATURE_HEADER], now=time.time(),
        )  # fmt: skip
        assert orjson.loads(got.body)["type"] == "test"
        assert got.headers[signing.EVENT_HEADER] == "test"
        assert re.search(r"Test event test_[0-9a-f]{12} delivered: HTTP 204 in \d+ ms", page)
        assert 'id="webhook-deliveries"' in page and "HTTP 204" in page
        failed = client.post("/dashboard/alerts/test/", follow=True).content.decode()
        assert "failed: receiver answered HTTP 500" in failed
    assert WebhookDelivery.objects.filter(org=org, kind="test").count() == 2


def test_members_cannot_send_test_events(org: Organization, eager: None) -> None:
    from django.contrib.auth import get_user_model

    from accounts import services as accounts

    member = get_user_model().objects.create_user("alert-member-2", password="x-pass-12345")
    accounts.add_member(org=org, user=member, role="member")
    client = Client()
    client.force_login(member)
    assert client.post("/dashboard/alerts/test/").status_code == 403


def test_secret_is_shown_once_when_made_and_when_rotated(
    org: Organization, owner: Any, eager: None
) -> None:
    client = _owner_client(owner)
    first = client.post("/dashboard/alerts/", {"low_balance_usd": "1"}, follow=True)
    secret = AlertSettings.objects.get(org=org).webhook_secret
    assert f'value="{secret}"' in first.content.decode()
    again = client.get("/dashboard/alerts/").content.decode()
    assert secret not in again and 'data-testid="secret-hidden"' in again
    assert secret[-4:] in again  # the tail, to tell secrets apart
    rotated = client.post("/dashboard/alerts/secret/", follow=True).content.decode()
    new = AlertSettings.objects.get(org=org).webhook_secret
    assert new != secret and f'value="{new}"' in rotated
    assert new not in client.get("/dashboard/alerts/").content.decode()
