"""The operator CLI: exact command names, their output, and clear errors on bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from accounts import keys
from accounts.models import ApiKey, Organization
from billing.models import LedgerEntry
from catalog.models import Deployment, Model

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_load_catalog() -> None:
    assert "created" in run("load_catalog")
    assert Model.objects.filter(id="anthropic/claude-sonnet-5-5").exists()
    assert "0 created" in run("load_catalog")


def test_create_org_with_credit_writes_a_ledger_entry() -> None:
    run("create_org", "Acme", "--credit-usd", "12.5")
    org = Organization.objects.get(name="Acme")
    assert org.balance_nano == 12_500_000_000
    entry = LedgerEntry.objects.get(org=org)
    assert entry.kind == "credit" and entry.amount_nano == 12_500_000_000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("create_org", ""), "empty"),
        (("create_org", "X", "--credit-usd", "abc"), "not a number"),
        (("create_org", "X", "--credit-usd", "-1"), "positive"),
        (("create_org", "X", "--credit-usd", "NaN"), "not a number"),
        (("create_org", "X", "--credit-usd", "0.0000000001"), "9 decimals"),
    ],
)
def test_create_org_bad_input(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert not Organization.objects.filter(name="X").exists()


def test_create_org_twice_refused() -> None:
    run("create_org", "Acme")
    with pytest.raises(CommandError, match="already exists"):
        run("create_org", "Acme")


def test_create_key_prints_secret_last_and_stores_only_hash() -> None:
    run("create_org", "Acme")
    output = run("create_key", "Acme", "--name", "ci", "--rpm", "42", "--spend-cap-usd", "5")
    secret = output.strip().splitlines()[-1]
    assert keys.is_well_formed(secret)
    key = ApiKey.objects.get(org__name="Acme")
    assert key.key_hash == keys.hash_key(secret) and key.rpm_limit == 42
    assert key.spend_cap_nano == 5_000_000_000
    assert secret not in str(ApiKey.objects.values().get(pk=key.pk))


def test_create_key_with_a_cap_period_and_an_allow_list() -> None:
    from catalog.services import load_catalog

    load_catalog()
    run("create_org", "Acme")
    run(
        "create_key", "Acme", "--spend-cap-usd", "1", "--cap-period", "day",
        "--allow-model", "claude-opus-5", "--allow-model", "anthropic/claude-haiku-5-5",
    )  # fmt: skip
    key = ApiKey.objects.get(org__name="Acme")
    assert key.spend_cap_period == "day"
    assert key.allowed_models == ["anthropic/claude-opus-5", "anthropic/claude-haiku-5-5"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("create_key", "Nope"), "unknown organization"),
        (("create_key", "Acme", "--rpm", "0"), "at least 1"),
        (("create_key", "Acme", "--rpm", "ten"), "not an integer"),
        (("create_key", "Acme", "--spend-cap-usd", "lots"), "not a number"),
        (("create_key", "Acme", "--allow-model", "gpt-nothing"), "unknown model"),
        (("create_key", "Acme", "--cap-period", "weekly"), "invalid choice"),
    ],
)
def test_create_key_bad_input(args: tuple[str, ...], message: str) -> None:
    run("create_org", "Acme")
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert not ApiKey.objects.exists()


def test_grant_credit() -> None:
    run("create_org", "Acme")
    output = run("grant_credit", "Acme", "2.25", "--memo", "top-up")
    assert "balance 2.25" in output
    entry = LedgerEntry.objects.get()
    assert entry.memo == "top-up" and entry.amount_nano == 2_250_000_000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("grant_credit", "Nope", "1"), "unknown organization"),
        (("grant_credit", "Acme", "0"), "positive"),
        (("grant_credit", "Acme", "1e"), "not a number"),
        (("grant_credit", "Acme", "1e3"), "exponent notation"),  # not $1,000 (issue 33)
        (("grant_credit", "Acme", "1E-9"), "exponent notation"),
    ],
)
def test_grant_credit_bad_input(args: tuple[str, ...], message: str) -> None:
    run("create_org", "Acme")
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert not LedgerEntry.objects.exists()


def test_add_deployment_creates_then_updates() -> None:
    run("load_catalog")
    assert "created" in run(
        "add_deployment", "d1", "--url", "http://127.0.0.1:9/", "--api-key", "sk-1234567890abcd"
    )
    deployment = Deployment.objects.get(name="d1")
    assert deployment.serves_all_models and deployment.base_url == "http://127.0.0.1:9"
    assert "updated" in run(
        "add_deployment",
        "d1",
        "--url",
        "http://127.0.0.1:10",
        "--api-key",
        "sk-new-key-1234",
        "--model",
        "anthropic/claude-haiku-4-5",
        "--weight",
        "3",
        "--max-concurrency",
        "7",
    )
    deployment.refresh_from_db()
    assert (deployment.weight, deployment.max_concurrency, deployment.serves_all_models) == (
        3,
        7,
        False,
    )
    assert deployment.get_api_key() == "sk-new-key-1234"
    assert list(deployment.models.values_list("model_id", flat=True)) == [
        "anthropic/claude-haiku-4-5"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("add_deployment", "d", "--url", "http://x", "--api-key", "k", "--model", "nope/nope"),
            "unknown model",
        ),
        (("add_deployment", "d", "--url", "not a url", "--api-key", "k"), "--url: base URL"),
        (("add_deployment", "d", "--url", "ftp://example.com", "--api-key", "k"), "ftp://"),
        (("add_deployment", "d", "--url", "http://exa mple.com", "--api-key", "k"), "--url: "),
        (("add_deployment", "d", "--url", "https://h:99999", "--api-key", "k"), "port"),
        (("add_deployment", "d", "--url", "http://x", "--api-key", " "), "api-key"),
        (
            ("add_deployment", "d", "--url", "http://x", "--api-key", "k", "--weight", "0"),
            "at least 1",
        ),
    ],
)
def test_add_deployment_bad_input(args: tuple[str, ...], message: str) -> None:
    run("load_catalog")
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert not Deployment.objects.exists()


def test_commands_exit_non_zero_on_bad_input() -> None:
    """Scripts rely on the exit code, not only the message."""
    env = {**os.environ, "DATABASE_URL": "sqlite:///:memory:"}
    result = subprocess.run(
        [sys.executable, "manage.py", "grant_credit", "Nope", "abc"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "Error" in result.stderr


def test_add_deployment_on_a_disabled_one_keeps_it_disabled_and_says_so() -> None:
    run("load_catalog")
    run("add_deployment", "d1", "--url", "http://127.0.0.1:9", "--api-key", "sk-1234567890abcd")
    run("set_deployment", "d1", "--disable")
    output = run(
        "add_deployment", "d1", "--url", "http://127.0.0.1:9", "--api-key", "sk-1234567890abcd"
    )
    assert not Deployment.objects.get(name="d1").enabled
    assert "set_deployment d1 --enable" in output
