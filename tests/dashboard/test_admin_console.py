"""Operator console details from issue 19: its header, where signing out lands, credit grants
in "Recent actions", ledger memos in the singular, amounts that do not wrap."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from billing.models import LedgerEntry
from billing.reconcile import reconcile_all
from tests.billing.factories import make_org, make_usage
from tests.dashboard.conftest import World


@pytest.fixture
def operator(db: Any) -> Client:
    admin = get_user_model().objects.create_superuser("ops2", "ops2@example.test", "ops-pass-1")
    client = Client()
    client.force_login(admin)
    return client


def test_header_says_operator_console(operator: Client) -> None:
    html = operator.get(reverse("admin:index")).content.decode()
    assert "EZAT Router operator console" in html
    assert "Django administration" not in html
    assert "ezat/admin.css" in html


def test_admin_logout_returns_to_the_admin_login(operator: Client) -> None:
    response = operator.post(reverse("admin:logout"))
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:login")
    # Signed out for real.
    assert operator.get(reverse("admin:index")).status_code == 302


def test_credit_grant_is_in_recent_actions(world: World, operator: Client) -> None:
    org = world.a.org
    url = reverse("admin:accounts_organization_changelist")
    page = operator.post(url, {"action": "grant_credit_action", ACTION_CHECKBOX_NAME: [org.pk]})
    nonce = re.search(r'name="nonce" value="([0-9a-f]+)"', page.content.decode())
    assert nonce
    data = {
        "action": "grant_credit_action",
        ACTION_CHECKBOX_NAME: [org.pk],
        "apply": "1",
        "amount_usd": "7",
        "memo": "goodwill",
        "nonce": nonce.group(1),
    }
    operator.post(url, data)
    operator.post(url, data)  # a double submit grants nothing and logs nothing
    entries = LogEntry.objects.filter(object_id=str(org.pk))
    assert [e.get_change_message() for e in entries] == ["Granted $7.00 credit: goodwill"]
    index = operator.get(reverse("admin:index")).content.decode()
    recent = index[index.index('id="recent-actions-module"') :]
    assert org.name in recent[: recent.index("</ul>")]


@pytest.mark.django_db
def test_ledger_memo_is_singular_for_one_record() -> None:
    one, many = make_org(credit_nano=10**9), make_org(credit_nano=10**9)
    record = make_usage(one)
    make_usage(many)
    make_usage(many)
    reconcile_all()
    assert LedgerEntry.objects.get(org=one, kind="usage").memo == f"1 usage record, id {record.pk}"
    assert LedgerEntry.objects.get(org=many, kind="usage").memo.startswith("2 usage records, ids ")


def test_ledger_amounts_do_not_wrap(world: World, operator: Client) -> None:
    html = operator.get(reverse("admin:billing_ledgerentry_changelist")).content.decode()
    assert re.search(r'<span class="amount">[−-]\$', html) or '<span class="amount">' in html
