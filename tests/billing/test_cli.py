"""Operator commands: output formats, and clear errors with a non-zero exit on bad input."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from accounts.models import Organization
from billing.models import LedgerEntry
from tests.billing.factories import make_org, make_usage, set_created_at
from tests.billing.harness import manage

USD = 1_000_000_000


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def last_line(text: str) -> str:
    return text.rstrip("\n").splitlines()[-1]


@pytest.mark.django_db
class TestBalance:
    def test_grant_then_balance(self) -> None:
        make_org("acme")
        granted = run("grant_credit", "acme", "15.5", "--memo", "welcome")
        assert "balance 15.5 USD" in granted
        assert run("balance", "acme") == "15.5\n"

    def test_balance_after_usage_and_reconcile_can_go_negative(self) -> None:
        org = make_org("acme", credit_nano=USD)
        make_usage(org, cost_nano=USD + 250_000_000)
        assert last_line(run("balance", "acme")) == "1"  # not reconciled yet
        run("reconcile")
        assert last_line(run("balance", "acme")) == "-0.25"

    def test_verbose_balance_keeps_the_number_on_the_last_line(self) -> None:
        org = make_org("acme", credit_nano=3 * USD)
        make_usage(org, cost_nano=7)
        out = run("balance", "acme", "-v", "2")
        assert "unreconciled usage: 0.000000007" in out
        assert last_line(out) == "3"

    def test_unknown_org(self) -> None:
        with pytest.raises(CommandError, match="unknown organization 'nope'"):
            run("balance", "nope")

    def test_missing_org_argument(self) -> None:
        with pytest.raises(CommandError, match="org_name"):
            run("balance")

    @pytest.mark.parametrize(
        "amount", ["abc", "-1", "0", "NaN", "Infinity", "0.0000000001", "1e400x", ""]
    )
    def test_grant_credit_refuses_bad_amounts(self, amount: str) -> None:
        make_org("acme")
        with pytest.raises(CommandError, match="amount"):
            run("grant_credit", "acme", amount)
        assert not LedgerEntry.objects.exists()
        assert Organization.objects.get(name="acme").balance_nano == 0

    def test_grant_credit_unknown_org(self) -> None:
        with pytest.raises(CommandError, match="unknown organization"):
            run("grant_credit", "nope", "5")


@pytest.mark.django_db
class TestUsage:
    @pytest.fixture
    def org(self) -> Organization:
        org = make_org("acme")
        other = make_org("globex")
        for day, cost in ((1, 1_500_000_000), (2, 10), (3, 100)):
            record = make_usage(
                org,
                cost_nano=cost,
                input_tokens=day,
                output_tokens=10 * day,
                cache_read_tokens=1,
                cache_write_5m_tokens=2,
                cache_write_1h_tokens=4,
                reasoning_tokens=3,
            )
            set_created_at(record, datetime(2026, 11, day, 12, tzinfo=UTC))
        make_usage(other, cost_nano=10**12)
        return org

    def test_json_all_time(self, org: Organization) -> None:
        report = json.loads(run("usage", "acme", "--json"))
        assert report == {
            "requests": 3,
            "input_tokens": 6,
            "output_tokens": 60,
            "cache_read_tokens": 3,
            "cache_write_tokens": 18,
            "reasoning_tokens": 9,
            "cost_usd": "1.50000011",
        }

    def test_bare_dates_cover_whole_days(self, org: Organization) -> None:
        report = json.loads(
            run("usage", "acme", "--json", "--since", "2026-11-02", "--until", "2026-11-02")
        )
        assert (report["requests"], report["cost_usd"]) == (1, "0.00000001")

    def test_iso_datetimes(self, org: Organization) -> None:
        report = json.loads(
            run(
                "usage",
                "acme",
                "--json",
                "--since",
                "2026-11-01T12:00:00Z",
                "--until",
                "2026-11-03T12:00:00+00:00",
            )
        )
        assert (report["requests"], report["cost_usd"]) == (2, "1.50000001")
        naive_is_utc = json.loads(run("usage", "acme", "--json", "--since", "2026-11-03T11:59"))
        assert naive_is_utc["requests"] == 1

    def test_empty_window(self, org: Organization) -> None:
        report = json.loads(run("usage", "acme", "--json", "--since", "2027-01-01"))
        assert report["requests"] == 0 and report["cost_usd"] == "0"

    def test_text_output(self, org: Organization) -> None:
        out = run("usage", "acme")
        assert "organization: acme" in out
        assert "cost_usd: 1.50000011" in out

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["--since", "2026-13-01"], "--since: '2026-13-01' is not a date"),
            (["--until", "yesterday"], "--until: 'yesterday' is not a date"),
            (["--since", "2026-11-31"], "is not a date"),
            (["--since", "2026-11-03", "--until", "2026-11-02"], "--since must be before"),
            (["--since", "2026-11-03T00:00", "--until", "2026-11-03T00:00"], "before --until"),
        ],
    )
    def test_bad_dates(self, org: Organization, args: list[str], message: str) -> None:
        with pytest.raises(CommandError, match=message):
            run("usage", "acme", "--json", *args)

    def test_unknown_org(self) -> None:
        with pytest.raises(CommandError, match="unknown organization"):
            run("usage", "nope", "--json")


@pytest.mark.django_db
class TestReconcileAndCheckLedger:
    def test_reconcile_reports_what_it_did_then_nothing(self) -> None:
        org = make_org("acme", credit_nano=USD)
        make_usage(org, cost_nano=2_000)
        make_usage(org, cost_nano=3_000)
        out = run("reconcile")
        assert "acme: 2 records, 0.000005 USD" in out
        assert last_line(out) == (
            "reconciled 2 records into 1 ledger entries in 1 batches: 0.000005 USD"
        )
        assert last_line(run("reconcile")) == "nothing to reconcile"
        assert last_line(run("balance", "acme")) == "0.999995"

    @pytest.mark.parametrize(
        "args", [["--batch-size", "0"], ["--max-batches", "0"], ["--batch-size", "x"]]
    )
    def test_reconcile_bad_options(self, args: list[str]) -> None:
        with pytest.raises(CommandError):
            run("reconcile", *args)

    def test_check_ledger_ok(self) -> None:
        org = make_org("acme", credit_nano=USD)
        make_usage(org, cost_nano=5)
        run("reconcile")
        assert run("check_ledger") == "ok: 1 organizations checked, no violations\n"

    def test_check_ledger_violation(self) -> None:
        make_org("acme", credit_nano=USD)
        make_org("globex", credit_nano=USD)
        Organization.objects.filter(name="globex").update(balance_nano=0)
        err = StringIO()
        with pytest.raises(CommandError, match="1 ledger violations in 1 of 2 organizations"):
            call_command("check_ledger", stdout=StringIO(), stderr=err)
        assert "globex" in err.getvalue() and "acme" not in err.getvalue()

    def test_check_ledger_one_org(self) -> None:
        make_org("acme")
        assert "1 organizations" in run("check_ledger", "--org", "acme")
        with pytest.raises(CommandError, match="unknown organization"):
            run("check_ledger", "--org", "nope")


@pytest.mark.django_db(transaction=True)
def test_real_processes_exit_non_zero_on_bad_input() -> None:
    """What an operator's shell sees: exit codes and messages from `python manage.py …`."""
    org = make_org("acme", credit_nano=15_500_000_000)
    make_usage(org, cost_nano=500_000_000)

    ok = manage("reconcile")
    assert ok.returncode == 0, ok.stderr
    assert last_line(ok.stdout).startswith("reconciled 1 records")
    balance = manage("balance", "acme")
    assert (balance.returncode, last_line(balance.stdout)) == (0, "15")

    for args, message in [
        (["balance", "nope"], "unknown organization 'nope'"),
        (["usage", "acme", "--json", "--since", "not-a-date"], "is not a date"),
    ]:
        bad = manage(*args)
        assert bad.returncode != 0, (args, bad.stdout)
        assert message in bad.stderr, (args, bad.stderr)

    Organization.objects.filter(pk=org.pk).update(balance_nano=1)
    broken = manage("check_ledger")
    assert broken.returncode != 0
    assert "ledger violations" in broken.stderr
