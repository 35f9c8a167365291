"""Alerts: thresholds cross once, deliveries by e-mail and a signed webhook to a real local
HTTP receiver, retries with backoff, refused webhook URLs, form errors and tenancy."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
from django.core import mail
from django.test import Client

from accounts import services as accounts
from accounts.models import Organization
from alerts import services, signing, webhook
from alerts.models import AlertEvent, AlertKind, AlertSettings, AlertState
from alerts.tasks import backoff_seconds, deliver_webhook
from billing.services import grant_credit
from tests.alerts.conftest import USD
from tests.alerts.receiver import webhook_receiver
from tests.billing.factories import make_usage

pytestmark = pytest.mark.django_db


def configure(org: Organization, *, low_usd: int | None = 20, url: str = "") -> AlertSettings:
    return services.save_settings(
        org=org,
        low_balance_nano=None if low_usd is None else low_usd * USD,
        key_cap_alerts=True,
        email_enabled=True,
        webhook_url=url,
        updated_by="t",
    )


def test_low_balance_alerts_once_per_crossing_and_rearms_after_a_top_up(
    org: Organization, eager: None, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        configure(org, low_usd=20)  # $10 < $20: crossed on save
    assert AlertEvent.objects.filter(org=org, kind=AlertKind.LOW_BALANCE).count() == 1
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["owner@example.test"]
    assert "below $20.00" in mail.outbox[0].body

    # Evaluated again and again while still below: nothing new.
    for _ in range(3):
        with django_capture_on_commit_callbacks(execute=True):
            assert services.evaluate_org(org.pk) == []
    assert AlertEvent.objects.filter(org=org).count() == 1
    assert len(mail.outbox) == 1

    grant_credit(org=org, amount_nano=30 * USD, memo="top-up")  # $40 available
    assert services.evaluate_org(org.pk) == []
    assert not AlertState.objects.get(org=org, kind=AlertKind.LOW_BALANCE).triggered

    # Unreconciled usage counts against the available balance: $40 - $25 = $15 < $20.
    make_usage(org, cost_nano=25 * USD)
    with django_capture_on_commit_callbacks(execute=True):
        created = services.evaluate_org(org.pk)
    assert len(created) == 1
    event = AlertEvent.objects.get(pk=created[0])
    assert event.crossing == 2
    assert event.payload["available_balance_usd"] == "15"
    assert len(mail.outbox) == 2


def test_no_alert_above_the_threshold_and_none_without_settings(org: Organization) -> None:
    assert services.evaluate_org(org.pk) == []
    configure(org, low_usd=5)
    assert services.evaluate_org(org.pk) == []
    assert not AlertEvent.objects.exists()


def test_key_cap_alerts_at_80_and_100_percent(
    org: Organization, owner: Any, eager: None, django_capture_on_commit_callbacks: Any
) -> None:
    key = accounts.create_api_key(org=org, name="capped", spend_cap_nano=10 * USD).key
    configure(org, low_usd=None)
    make_usage(org, api_key=key, cost_nano=7 * USD)
    assert services.evaluate_org(org.pk) == []
    make_usage(org, api_key=key, cost_nano=1 * USD)  # 80 %
    with django_capture_on_commit_callbacks(execute=True):
        [first] = services.evaluate_org(org.pk)
    assert AlertEvent.objects.get(pk=first).kind == AlertKind.KEY_CAP_80
    make_usage(org, api_key=key, cost_nano=2 * USD)  # 100 %
    with django_capture_on_commit_callbacks(execute=True):
        [second] = services.evaluate_org(org.pk)
    event = AlertEvent.objects.get(pk=second)
    assert event.kind == AlertKind.KEY_CAP_100
    assert event.api_key_id == key.pk
    assert event.payload["key"]["prefix"] == key.prefix
    assert services.evaluate_org(org.pk) == []
    assert len(mail.outbox) == 2


def test_webhook_is_signed_and_delivered_once_to_a_real_receiver(
    org: Organization, eager: None, django_capture_on_commit_callbacks: Any
) -> None:
    with webhook_receiver() as receiver:
        with django_capture_on_commit_callbacks(execute=True):
            row = configure(org, low_usd=20, url=receiver.url)
        assert receiver.count() == 1
        got = receiver.requests[0]
        assert got.path == "/hooks/ezat"
        assert signing.verify(
            row.webhook_secret,
            got.body,
            got.headers[signing.TIMESTAMP_HEADER],
            got.headers[signing.SIGNATURE_HEADER],
            now=time.time(),
        )
        # A forged body or another secret does not verify.
        assert not signing.verify(
            row.webhook_secret,
            got.body + b" ",
            got.headers[signing.TIMESTAMP_HEADER],
            got.headers[signing.SIGNATURE_HEADER],
            now=time.time(),
        )
        assert not signing.verify(
            signing.new_secret(),
            got.body,
            got.headers[signing.TIMESTAMP_HEADER],
            got.headers[signing.SIGNATURE_HEADER],
            now=time.time(),
        )
        payload = orjson.loads(got.body)
        assert payload["type"] == "low_balance"
        assert payload["org"] == {"id": org.pk, "name": org.name}
        assert payload["threshold_usd"] == "20"
        assert got.headers[signing.EVENT_HEADER] == "low_balance"
        event = AlertEvent.objects.get(org=org)
        assert event.webhook_status == AlertEvent.Delivery.SENT
        assert got.headers[signing.DELIVERY_HEADER] == f"alert_{event.pk}"

        # A redelivered task message (or a second evaluation) sends nothing again.
        deliver_webhook.apply(args=[event.pk])
        with django_capture_on_commit_callbacks(execute=True):
            services.evaluate_org(org.pk)
        assert receiver.count() == 1


def test_failed_webhook_is_retried_with_backoff_until_delivered(
    org: Organization, eager: None, django_capture_on_commit_callbacks: Any
) -> None:
    with webhook_receiver(statuses=[500, 503, 200]) as receiver:
        with django_capture_on_commit_callbacks(execute=True):
            configure(org, low_usd=20, url=receiver.url)
        assert receiver.count() == 3
        event = AlertEvent.objects.get(org=org)
        assert event.webhook_status == AlertEvent.Delivery.SENT
        assert event.webhook_attempts == 3
        # Every attempt carries the same alert and a valid signature.
        secret = AlertSettings.objects.get(org=org).webhook_secret
        for got in receiver.requests:
            assert orjson.loads(got.body)["id"] == f"alert_{event.pk}"
            assert signing.verify(
                secret,
                got.body,
                got.headers[signing.TIMESTAMP_HEADER],
                got.headers[signing.SIGNATURE_HEADER],
                now=time.time(),
            )


def test_webhook_gives_up_after_the_last_retry(
    org: Organization, eager: None, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.EZAT_ALERT_WEBHOOK_MAX_RETRIES = 2
    with webhook_receiver(statuses=[500]) as receiver:
        with django_capture_on_commit_callbacks(execute=True):
            configure(org, low_usd=20, url=receiver.url)
        assert receiver.count() == 3  # the first try and two retries
    event = AlertEvent.objects.get(org=org)
    assert event.webhook_status == AlertEvent.Delivery.FAILED
    assert "HTTP 500" in event.webhook_last_error


def test_backoff_doubles(settings: Any) -> None:
    settings.EZAT_ALERT_RETRY_BASE_SECONDS = 10
    assert [backoff_seconds(n) for n in range(4)] == [10, 20, 40, 80]
    assert backoff_seconds(20) == 3600


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "http://192.168.0.5/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hook",
        "http://[fe80::1]/hook",
        "http://0x7f.1/hook",
        "ftp://example.com/hook",
        "http://user:pw@example.com/hook",
    ],
)
def test_webhook_urls_on_private_addresses_are_refused(url: str) -> None:
    with pytest.raises(webhook.WebhookURLError, match="Webhook URL refused"):
        webhook.check_webhook_url(url)


def test_delivery_rechecks_the_address_at_connect_time() -> None:
    # Saved while allowed, delivered when not: the guarded backend refuses to connect.
    with pytest.raises(webhook.DeliveryFailed, match="not public"):
        webhook.post("http://127.0.0.1:9/hook", b"{}", {})


def _owner_client(org: Organization, owner: Any) -> Client:
    client = Client()
    client.force_login(owner)
    return client


def test_settings_form_refuses_bad_input_and_saves_nothing(org: Organization, owner: Any) -> None:
    client = _owner_client(org, owner)
    for data, message in [
        ({"low_balance_usd": "-1"}, "cannot be negative"),
        ({"webhook_url": "http://10.0.0.1/x"}, "the address is not public"),
        ({"webhook_url": "http://localhost/x"}, "not public"),
        ({"low_balance_usd": "abc"}, "Enter a number"),
    ]:
        response = client.post("/dashboard/alerts/", data)
        assert response.status_code == 400
        assert message in response.content.decode()
    assert not AlertSettings.objects.filter(org=org).exists()

    response = client.post(
        "/dashboard/alerts/", {"low_balance_usd": "5", "key_cap_alerts": "on"}, follow=True
    )
    assert response.status_code == 200
    row = AlertSettings.objects.get(org=org)
    assert row.low_balance_nano == 5 * USD
    assert row.webhook_secret.startswith("whsec_")


def test_alerts_page_tenancy_and_owner_only_changes(org: Organization, owner: Any) -> None:
    from django.contrib.auth import get_user_model

    other = accounts.create_org(name="Other Co")
    grant_credit(org=other, amount_nano=1 * USD, memo="c")
    services.save_settings(
        org=other,
        low_balance_nano=50 * USD,
        key_cap_alerts=True,
        email_enabled=False,
        webhook_url="",
        updated_by="t",
    )
    services.evaluate_org(other.pk)
    assert AlertEvent.objects.filter(org=other).count() == 1

    member = get_user_model().objects.create_user("alert-member", password="x-pass-12345")
    accounts.add_member(org=org, user=member, role="member")
    client = Client()
    client.force_login(member)
    page = client.get("/dashboard/alerts/")
    assert page.status_code == 200
    assert "Other Co" not in page.content.decode()
    assert "whsec_" not in page.content.decode()
    assert client.post("/dashboard/alerts/", {"low_balance_usd": "1"}).status_code == 403
    assert client.post("/dashboard/alerts/secret/").status_code == 403
    assert not AlertSettings.objects.filter(org=org).exists()

    owner_page = _owner_client(org, owner).get("/dashboard/alerts/").content.decode()
    assert "Other Co" not in owner_page


@pytest.mark.django_db(transaction=True)
def test_embedded_loop_evaluates_alerts_without_beat(
    eager: None, settings: Any, owner: Any
) -> None:
    """No Redis, no beat: the gateway's reconciliation loop runs the alert evaluation."""
    from django.utils.module_loading import import_string

    from gateway.app import _reconcile_once

    for dotted in settings.EZAT_EMBEDDED_PERIODIC:
        assert callable(import_string(dotted))
    org = accounts.create_org(name="Embedded Co")
    accounts.add_member(org=org, user=owner, role="owner")
    AlertSettings.objects.create(
        org=org,
        low_balance_nano=20 * USD,
        email_enabled=True,
        webhook_secret=signing.new_secret(),
    )
    _reconcile_once()
    assert AlertEvent.objects.filter(org=org, kind=AlertKind.LOW_BALANCE).count() == 1
    assert len(mail.outbox) == 1
    _reconcile_once()
    assert AlertEvent.objects.filter(org=org).count() == 1


def test_key_cap_alert_counts_the_caps_own_period(org: Organization) -> None:
    """A daily cap counts today's spend only; a total cap counts everything."""
    from datetime import timedelta

    from django.utils import timezone

    from tests.billing.factories import set_created_at

    daily = accounts.create_api_key(org=org, name="daily", spend_cap_nano=10 * USD).key
    daily.spend_cap_period = "day"
    daily.save(update_fields=["spend_cap_period"])
    total = accounts.create_api_key(org=org, name="total", spend_cap_nano=10 * USD).key
    total.spend_cap_period = "total"
    total.save(update_fields=["spend_cap_period"])
    configure(org, low_usd=None)
    for key in (daily, total):
        old = make_usage(org, api_key=key, cost_nano=9 * USD)
        set_created_at(old, timezone.now() - timedelta(days=40))
        make_usage(org, api_key=key, cost_nano=1 * USD)
    created = services.evaluate_org(org.pk)
    kinds = {(e.api_key_id, e.kind) for e in AlertEvent.objects.filter(pk__in=created)}
    # Daily: $1 of $10 today, nothing. Total: $10 of $10, both levels.
    assert kinds == {(total.pk, AlertKind.KEY_CAP_80), (total.pk, AlertKind.KEY_CAP_100)}
