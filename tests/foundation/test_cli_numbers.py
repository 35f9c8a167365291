"""Every numeric option of every project command refuses bad numbers with one line naming the
option and a non-zero exit, never a traceback (issue 17, item 5).

The options are found by introspecting the commands' parsers (core/cli.py tags its numeric
parsers), so a command or option added later is covered without editing this test; options
that look numeric but are parsed some other way fail the guard test.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

from core import cli

ROOT = Path(__file__).resolve().parents[2]
PROJECT_APPS = ("accounts", "billing", "catalog", "core", "gateway", "ezat", "simulator")
BAD_VALUES = ("-1", "0", "abc", "1e309")
# Names of options that hold numbers: each must be parsed by one of core/cli.py's parsers.
NUMERIC_NAME = re.compile(
    r"(^|_)(usd|rpm|port|weight|concurrency|share|size|batches|count|limit|seconds)(_|$)"
)


def _django_options() -> set[str]:
    """Django's own options on every command (--verbosity and friends): not ours to change."""
    from django.core.management.base import BaseCommand

    return {a.dest for a in BaseCommand().create_parser("manage.py", "x")._actions}


def _project_commands() -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for name, app in sorted(get_commands().items()):
        if app in PROJECT_APPS:
            command = load_command_class(app, name)
            found.append((name, command.create_parser("manage.py", name)))
    return found


def _numeric_cases() -> list[tuple[str, str, str]]:
    cases = []
    for name, parser in _project_commands():
        for action in parser._actions:
            if getattr(action.type, "numeric", False):
                label = action.option_strings[-1] if action.option_strings else action.dest
                for value in BAD_VALUES:
                    cases.append((name, label, value))
    return cases


def _argv(command: str, option: str, value: str) -> list[str]:
    """The command with filler for its other required arguments and `option` set to `value`."""
    parser = dict(_project_commands())[command]
    positionals: list[str] = []
    required: list[str] = []
    for action in parser._actions:
        if action.option_strings:
            if action.required and action.option_strings[-1] != option:
                required += [action.option_strings[-1], "filler"]
        elif isinstance(action, argparse._StoreAction):
            positionals.append(value if action.dest == option else "filler")
    positional = any(a.dest == option and not a.option_strings for a in parser._actions)
    return ["manage.py", command, *positionals, *required, *([] if positional else [option, value])]


CASES = _numeric_cases()


def test_the_numeric_options_are_found() -> None:
    options = {(command, option) for command, option, _ in CASES}
    for expected in [
        ("create_key", "--rpm"),
        ("create_key", "--spend-cap-usd"),
        ("create_org", "--credit-usd"),
        ("grant_credit", "amount_usd"),
        ("add_deployment", "--weight"),
        ("add_deployment", "--max-concurrency"),
        ("reconcile", "--batch-size"),
        ("reconcile", "--max-batches"),
        ("simulator", "--port"),
    ]:
        assert expected in options


def test_every_option_holding_a_number_has_a_checked_parser() -> None:
    unchecked = []
    django_options = _django_options()
    for name, parser in _project_commands():
        for action in parser._actions:
            if action.dest in django_options:
                continue
            if action.type in (int, float) or (
                NUMERIC_NAME.search(action.dest)
                and action.nargs != 0
                and not getattr(action.type, "numeric", False)
            ):
                unchecked.append(f"{name} {action.option_strings or action.dest}")
    assert unchecked == []


@pytest.mark.django_db
@pytest.mark.parametrize(("command", "option", "value"), CASES)
def test_bad_numbers_are_one_line_and_a_non_zero_exit(
    command: str, option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(_argv(command, option, value))
    assert exited.value.code not in (0, None)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and option.lstrip("-").split("_")[0] in lines[0], err


@pytest.mark.parametrize(
    "argv",
    [
        ["manage.py", "create_key", "demo", "--rpm", "-1"],
        ["manage.py", "add_deployment", "s", "--url", "http://x", "--api-key", "k", "--weight", "-3"],
        ["manage.py", "add_deployment", "s", "--url", "http://x", "--api-key", "k",
         "--max-concurrency", "0"],
        ["-m", "simulator", "--port", "abc"],
    ],
)  # fmt: skip
def test_the_real_command_line_prints_one_line(argv: list[str]) -> None:
    env = {**os.environ, "DATABASE_URL": "sqlite:///:memory:"}
    result = subprocess.run(
        [sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.django_db
def test_call_command_keyword_amounts_mean_usd() -> None:
    """call_command's keyword options skip the parsers: the commands still read them as USD."""
    from io import StringIO

    from django.core.management import call_command

    from accounts.models import Organization
    from billing.models import LedgerEntry

    call_command("create_org", "Kw", credit_usd="12.5", stdout=StringIO())
    org = Organization.objects.get(name="Kw")
    assert org.balance_nano == 12_500_000_000
    assert LedgerEntry.objects.get(org=org).memo == "initial credit"
    out = StringIO()
    call_command("create_key", "Kw", name="k", spend_cap_usd="5", rpm=10, stdout=out)
    key = org.api_keys.get(name="k")
    assert key.spend_cap_nano == 5_000_000_000 and key.rpm_limit == 10
