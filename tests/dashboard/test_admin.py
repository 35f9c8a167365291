"""The operator console: grant credit writes a ledger entry; secrets never reach a page."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from accounts.models import ApiKey
from billing.models import LedgerEntry, UsageRecord
from catalog.models import Deployment, Model
from tests.dashboard.conftest import World

PROVIDER_KEY = "sk-ant-provider-SECRET-0123456789"


@pytest.fixture
def operator(db: Any) -> Client:
    admin = get_user_model().objects.create_superuser("ops", "ops@example.test", "ops-pass-12345")
    client = Client()
    client.force_login(admin)
    return client


@pytest.fixture
def deployment(db: Any) -> Deployment:
    deployment = Deployment(name="primary", base_url="https://api.example.test")
    deployment.set_api_key(PROVIDER_KEY)
    deployment.save()
    return deployment


def _html(response) -> str:  # type: ignore[no-untyped-def]
    return response.content.decode()


def test_grant_credit_action_writes_a_ledger_entry(world: World, operator: Client) -> None:
    org = world.a.org
    url = reverse("admin:accounts_organization_changelist")
    before = org.balance_nano
    # Step 1: the action shows the intermediate form (and changes nothing yet).
    form_page = operator.post(
        url, {"action": "grant_credit_action", ACTION_CHECKBOX_NAME: [org.pk]}
    )
    assert form_page.status_code == 200
    html = _html(form_page)
    assert "Amount (USD)" in html and "Memo" in html
    nonce = re.search(r'name="nonce" value="([0-9a-f]+)"', html)
    assert nonce
    assert LedgerEntry.objects.filter(org=org).count() == 1
    # Step 2: apply.
    data = {
        "action": "grant_credit_action",
        ACTION_CHECKBOX_NAME: [org.pk],
        "apply": "1",
        "amount_usd": "12.345",
        "memo": "invoice 42",
        "nonce": nonce.group(1),
    }
    response = operator.post(url, data)
    assert response.status_code == 302
    entry = LedgerEntry.objects.get(org=org, memo="invoice 42")
    assert entry.kind == LedgerEntry.Kind.CREDIT and entry.amount_nano == 12_345_000_000
    assert entry.created_by == "ops"
    org.refresh_from_db()
    assert org.balance_nano == before + 12_345_000_000
    # A double submit (same form, same nonce) does not credit twice.
    operator.post(url, data)
    org.refresh_from_db()
    assert org.balance_nano == before + 12_345_000_000
    assert LedgerEntry.objects.filter(org=org, memo="invoice 42").count() == 1
    # The customer sees it.
    customer = world.client(world.member_a)
    # Balances show 2 decimals (issue 19): 62.345 rounds half up.
    assert "$62.35" in _html(customer.get(reverse("dashboard:balance")))
    assert "invoice 42" in _html(customer.get(reverse("dashboard:balance")))
    # The org list shows the balance in USD.
    # Balances show 2 decimals (issue 19): 62.345 rounds half up.
    assert "$62.35" in _html(operator.get(url))


def test_grant_credit_rejects_bad_amounts(world: World, operator: Client) -> None:
    url = reverse("admin:accounts_organization_changelist")
    for amount in ("0", "-5", "abc", "0.0000000001", "2000000"):
        response = operator.post(
            url,
            {
                "action": "grant_credit_action",
                ACTION_CHECKBOX_NAME: [world.a.org.pk],
                "apply": "1",
                "amount_usd": amount,
                "memo": "m",
                "nonce": "n" * 32,
            },
        )
        assert response.status_code == 200, amount  # the form again, with an error
    assert LedgerEntry.objects.filter(memo="m").count() == 0


def test_grant_credit_errors_have_no_exponents_and_refuse_them(
    world: World, operator: Client
) -> None:
    """Issue 33: the minimum read "1E-9", and "1e3" was taken as $1,000."""
    url = reverse("admin:accounts_organization_changelist")
    pages = {}
    for amount in ("0", "1e3", "1E-9"):
        response = operator.post(
            url,
            {
                "action": "grant_credit_action",
                ACTION_CHECKBOX_NAME: [world.a.org.pk],
                "apply": "1",
                "amount_usd": amount,
                "memo": "m",
                "nonce": "n" * 32,
            },
        )
        assert response.status_code == 200, amount
        pages[amount] = _html(response)
    assert "at least 0.000000001" in pages["0"]
    assert "e-9" not in pages["0"].lower()  # nor in the widget's min/step attributes
    assert "exponent notation" in pages["1e3"] and "exponent notation" in pages["1E-9"]
    assert LedgerEntry.objects.filter(memo="m").count() == 0


def test_balance_is_read_only_in_admin(world: World, operator: Client) -> None:
    org = world.a.org
    url = reverse("admin:accounts_organization_change", args=[org.pk])
    html = _html(operator.get(url))
    assert 'name="balance_nano"' not in html
    operator.post(
        url,
        {
            "name": org.name,
            "balance_nano": "999999999999999",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )
    org.refresh_from_db()
    assert org.balance_nano == 50_000_000_000


def test_admin_never_renders_key_hashes(world: World, operator: Client) -> None:
    key = world.a.key
    pages = [
        reverse("admin:accounts_apikey_changelist"),
        reverse("admin:accounts_apikey_change", args=[key.pk]),
        reverse("admin:accounts_organization_change", args=[world.a.org.pk]),
        reverse("admin:billing_usagerecord_changelist"),
        reverse(
            "admin:billing_usagerecord_change",
            args=[UsageRecord.objects.get(request_id=world.a.request_id).pk],
        ),
    ]
    for url in pages:
        response = operator.get(url)
        assert response.status_code == 200, url
        html = _html(response)
        assert key.key_hash not in html, url
        assert world.a.secret not in html, url
        assert "key_hash" not in html, url
    assert key.prefix in _html(operator.get(pages[0]))
    assert operator.get(reverse("admin:accounts_apikey_add")).status_code == 403


def test_admin_revoke_and_limits(world: World, operator: Client) -> None:
    key = world.a.key
    url = reverse("admin:accounts_apikey_change", args=[key.pk])
    response = operator.post(url, {"name": "renamed", "rpm_limit": "5", "spend_cap_usd": "1.5"})
    assert response.status_code == 302
    key.refresh_from_db()
    assert (key.name, key.rpm_limit, key.spend_cap_nano) == ("renamed", 5, 1_500_000_000)
    assert key.spend_cap_period == "month"  # absent from the form: kept
    period = {"name": "renamed", "spend_cap_usd": "1.5", "spend_cap_period": "day"}
    assert operator.post(url, period).status_code == 302
    key.refresh_from_db()
    assert key.spend_cap_period == "day"
    assert "/ day" in operator.get(reverse("admin:accounts_apikey_changelist")).content.decode()
    operator.post(
        reverse("admin:accounts_apikey_changelist"),
        {"action": "revoke_keys", ACTION_CHECKBOX_NAME: [key.pk]},
    )
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert ApiKey.objects.get(pk=world.b.key.pk).revoked_at is None


def test_admin_revokes_management_keys(world: World, operator: Client) -> None:
    from accounts.models import ManagementKey
    from accounts.services import create_management_key

    mine, _ = create_management_key(org=world.a.org, name="ci")
    other, _ = create_management_key(org=world.b.org, name="other")
    operator.post(
        reverse("admin:accounts_managementkey_changelist"),
        {"action": "revoke_management_keys", ACTION_CHECKBOX_NAME: [mine.pk]},
    )
    assert ManagementKey.objects.get(pk=mine.pk).revoked_at is not None
    assert ManagementKey.objects.get(pk=other.pk).revoked_at is None


def test_the_options_help_names_every_provider_option(
    operator: Client, deployment: Deployment
) -> None:
    from catalog.platform_config import OPTIONS

    html = _html(operator.get(reverse("admin:catalog_deployment_change", args=[deployment.pk])))
    for name in OPTIONS:  # responses_api among them: the relay's switch (docs/providers.md)
        assert name in html, name


def test_provider_key_is_write_only(operator: Client, deployment: Deployment) -> None:
    change = reverse("admin:catalog_deployment_change", args=[deployment.pk])
    for url in (reverse("admin:catalog_deployment_changelist"), change):
        response = operator.get(url)
        assert response.status_code == 200
        html = _html(response)
        assert PROVIDER_KEY not in html and deployment.api_key_encrypted not in html
        assert "…6789" in html  # the hint
    html = _html(operator.get(reverse("admin:catalog_deployment_changelist")))
    # The live-state column renders: counts from the limiter, or "n/a" when it cannot say.
    assert re.search(r"(\d+|n/a) in flight · (healthy|cooling \d+s|cooldown n/a)", html)
    form = {
        "name": "primary",
        "kind": "anthropic",
        "base_url": "https://api2.example.test/",
        "weight": "2",
        "enabled": "on",
        "max_concurrency": "10",
        "fair_share": "0.5",
        "serves_all_models": "on",
        "new_api_key": "",
        "models-TOTAL_FORMS": "0",
        "models-INITIAL_FORMS": "0",
    }
    assert operator.post(change, form).status_code == 302
    deployment.refresh_from_db()
    assert deployment.get_api_key() == PROVIDER_KEY  # empty field keeps the key
    assert deployment.base_url == "https://api2.example.test"
    assert (
        operator.post(change, {**form, "new_api_key": "sk-new-key-abcdefWXYZ"}).status_code == 302
    )
    deployment.refresh_from_db()
    assert deployment.get_api_key() == "sk-new-key-abcdefWXYZ"
    assert deployment.api_key_hint == "…WXYZ"
    # A new deployment needs a key.
    add = reverse("admin:catalog_deployment_add")
    response = operator.post(add, {**form, "name": "second", "new_api_key": ""})
    assert response.status_code == 200 and not Deployment.objects.filter(name="second").exists()
    # A URL the gateway cannot call is refused with the field named (catalog/deployment_urls.py).
    for bad in ("ftp://example.com", "https://bad_host!.example"):
        response = operator.post(
            add, {**form, "name": "third", "base_url": bad, "new_api_key": "k"}
        )
        assert response.status_code == 200, bad
        assert "base_url" in response.context["adminform"].form.errors, bad
        assert not Deployment.objects.filter(name="third").exists()


def test_enable_disable_actions_bump_the_catalog(operator: Client, deployment: Deployment) -> None:
    from catalog.models import CatalogVersion

    def version() -> int:
        return CatalogVersion.objects.filter(pk=1).values_list("version", flat=True).first() or 0

    before = version()
    url = reverse("admin:catalog_deployment_changelist")
    operator.post(url, {"action": "disable_deployments", ACTION_CHECKBOX_NAME: [deployment.pk]})
    deployment.refresh_from_db()
    assert not deployment.enabled and version() > before
    operator.post(url, {"action": "enable_deployments", ACTION_CHECKBOX_NAME: [deployment.pk]})
    deployment.refresh_from_db()
    assert deployment.enabled


def test_price_change_never_rewrites_usage(world: World, operator: Client) -> None:
    """A price change in the admin is a new version, effective now; history stays."""
    from catalog.models import PriceVersion
    from catalog.services import load_catalog

    load_catalog()
    model = Model.objects.get(id="anthropic/claude-sonnet-5-5")
    first = PriceVersion.objects.get(model=model)
    record = UsageRecord.objects.get(request_id=world.a.request_id)
    html = _html(operator.get(reverse("admin:catalog_model_change", args=[model.pk])))
    assert "Prices (USD per million tokens)" in html and "Add a new price version" in html
    assert "input 2, output 10, cacheRead 0.2, cacheWrite5m 2.5, cacheWrite1h 4" in html

    tiers = {
        "tiers-TOTAL_FORMS": "1",
        "tiers-INITIAL_FORMS": "0",
        "tiers-MIN_NUM_FORMS": "1",
        "tiers-MAX_NUM_FORMS": "1000",
        "tiers-0-up_to_prompt_tokens": "",
        "tiers-0-price_input": "99",
        "tiers-0-price_output": "100",
        "tiers-0-price_cache_read": "9.9",
        "tiers-0-price_cache_write_5m": "123.75",
        "tiers-0-price_cache_write_1h": "198",
    }
    add = reverse("admin:catalog_priceversion_add")
    response = operator.post(add, {"model": model.pk, **tiers})
    assert response.status_code == 302, _html(response)
    newest = PriceVersion.objects.filter(model=model).exclude(pk=first.pk).get()
    assert newest.source == "admin: ops" and newest.effective_from > first.effective_from
    record.refresh_from_db()
    assert record.prices["input"] == "3" and record.cost_nano == 6_000_000

    html = _html(operator.get(reverse("admin:catalog_model_change", args=[model.pk])))
    # The history lists both versions, newest first; the one in force is the new one.
    assert html.index("input 99, output 100") < html.index("input 2, output 10")
    assert "cacheWrite5m 123.75" in html and "E+" not in html

    # A saved version is history: it cannot be edited or deleted.
    change = reverse("admin:catalog_priceversion_change", args=[newest.pk])
    operator.post(change, {"model": model.pk, **tiers, "tiers-0-price_input": "1"})
    assert newest.tiers.get().price_input == 99
    delete = reverse("admin:catalog_priceversion_delete", args=[newest.pk])
    assert operator.post(delete, {"post": "yes"}).status_code == 403


def test_overlapping_tiers_are_refused_in_the_admin(operator: Client) -> None:
    from catalog.models import PriceVersion
    from catalog.services import load_catalog

    load_catalog()
    model = Model.objects.get(id="anthropic/claude-haiku-5-5")
    before = PriceVersion.objects.filter(model=model).count()
    tier = {
        "price_input": "1",
        "price_output": "1",
        "price_cache_read": "1",
        "price_cache_write_5m": "1",
        "price_cache_write_1h": "1",
    }
    data = {
        "model": model.pk,
        "tiers-TOTAL_FORMS": "2",
        "tiers-INITIAL_FORMS": "0",
        "tiers-MIN_NUM_FORMS": "1",
        "tiers-MAX_NUM_FORMS": "1000",
        **{f"tiers-0-{k}": v for k, v in tier.items()},
        **{f"tiers-1-{k}": v for k, v in tier.items()},
        "tiers-0-up_to_prompt_tokens": "",
        "tiers-1-up_to_prompt_tokens": "",
    }
    response = operator.post(reverse("admin:catalog_priceversion_add"), data)
    assert response.status_code == 200
    assert "only the last tier may be unbounded" in _html(response)
    assert PriceVersion.objects.filter(model=model).count() == before


def test_usage_record_page_itemises_its_cost(world: World, operator: Client) -> None:
    record = UsageRecord.objects.get(request_id=world.a.request_id)
    html = _html(operator.get(reverse("admin:billing_usagerecord_change", args=[record.pk])))
    assert "Itemised cost" in html and "USD per million tokens" in html
    assert "Total billed (rounded once to the nano-dollar): $0.006000" in html
    assert "E+" not in html and "E-" not in html


@pytest.mark.parametrize("model_name", ["usagerecord", "ledgerentry"])
def test_usage_and_ledger_are_read_only(world: World, operator: Client, model_name: str) -> None:
    obj = (
        (UsageRecord if model_name == "usagerecord" else LedgerEntry)
        .objects.filter(org=world.a.org)
        .first()
    )
    assert obj is not None
    base = f"admin:billing_{model_name}"
    assert operator.get(reverse(f"{base}_changelist")).status_code == 200
    assert operator.get(reverse(f"{base}_add")).status_code == 403
    assert operator.get(reverse(f"{base}_delete", args=[obj.pk])).status_code == 403
    change = operator.get(reverse(f"{base}_change", args=[obj.pk]))
    assert change.status_code == 200 and 'name="_save"' not in _html(change)
    assert operator.post(reverse(f"{base}_change", args=[obj.pk]), {}).status_code == 403
