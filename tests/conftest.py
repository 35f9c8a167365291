"""Shared fixtures and the kinds of test.

The tests mirror the product's tree (tests/<app>/, tests/gateway/<subpackage>/, docs/testing.md);
what kind a test is (unit, e2e, browser, cluster) is a marker, not a directory. The end-to-end
stack (a running gateway in front of simulators) and the browser fixtures are plugins loaded
here for every directory (tests/support/stack.py, tests/support/browser.py); their session
fixtures start only when a test asks for them, so a unit-only run starts no gateway.
"""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import services

pytest_plugins = ["tests.support.stack", "tests.support.browser"]

# Every test is exactly one of these (tests/foundation/test_test_kinds.py checks it). A module
# that drives running processes says so with `pytestmark`; a test that says nothing is `unit`.
KINDS = ("unit", "e2e", "browser", "cluster")
# The fixtures that start a kind's processes: a test that uses one is of that kind, so a new
# end-to-end module that forgets its `pytestmark` fails collection instead of passing as unit.
KIND_FIXTURES = {
    "stack": "e2e",
    "e2e": "e2e",
    "app": "browser",
    "browser": "browser",
    "cluster": "cluster",
    "infra": "cluster",
}


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """Start the session's private Redis before any test module is imported (modules derive
    their URLs from it) and point the app's settings at it. See tests/services.py."""
    # A shell without job control starts background commands with SIGINT ignored, and an
    # ignored signal stays ignored across exec: the processes the Ctrl-C tests start (the
    # simulator's CLI, `make run`) would never see their SIGINT. A handled signal resets to the
    # default at exec, so taking it here gives every child a live Ctrl-C, however CI started us.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # SIGTERM (CI cancelled; .ci/run stopping what it started) ends the run as Ctrl-C does:
    # pytest then tears its fixtures down, stopping the Celery workers, beat and gateways it
    # started in sessions of their own, instead of dying and leaving them running (issue 33).
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)
    server = services.session_server()  # may have started already (tests/services.py)
    from django.conf import settings

    if services.production_shape():
        # Settings were read before this conftest loaded (pytest-django sets Django up first):
        # whatever REDIS_URL said, this process and every child it starts use the private one.
        url = server.url(services.REDIS_DB_APP)
        os.environ["REDIS_URL"] = url
        settings.REDIS_URL = url
        settings.CELERY_BROKER_URL = url
        # Only the host changes: the key prefix stays the one every gateway process derives
        # from EZAT_REDIS_PREFIX, or the test would listen where no gateway publishes.
        layer = settings.CHANNEL_LAYERS["default"]
        layer["CONFIG"] = {**layer.get("CONFIG", {}), "hosts": [url]}
    # The usage spool, checkpoint and quarantine files of this session (and every gateway it starts) stay
    # in a directory of its own, never in the checkout's var/ (billing/spool.py).
    durable = tempfile.mkdtemp(prefix="ezat-test-durable-")
    for name, sub in (
        ("EZAT_USAGE_SPOOL_DIR", "spool"),
        ("EZAT_CHECKPOINT_DIR", "checkpoints"),
        ("EZAT_REQUEST_LOG_QUARANTINE_DIR", "quarantine"),
    ):
        os.environ[name] = os.path.join(durable, sub)
        setattr(settings, name, os.environ[name])
    default_db = settings.DATABASES["default"]
    if default_db["ENGINE"].endswith("postgresql"):
        default_db.setdefault("TEST", {})["NAME"] = services.isolated_db_name(
            default_db["NAME"], Path(__file__).resolve().parents[1]
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test whose tool is missing (services.MissingTool: no chromium, no haproxy, no
    PostgreSQL) is skipped with the reason, shown in the summary by `-ra`; in CI
    (`services.strict()`) it stays a failure, so CI never passes by skipping."""
    outcome = yield
    report = outcome.get_result()
    excinfo = call.excinfo
    if excinfo is None or services.strict() or not excinfo.errisinstance(services.MissingTool):
        return
    path, line, _ = item.location
    report.outcome = "skipped"
    report.longrepr = (str(path), (line or 0) + 1, f"Skipped: {excinfo.value}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked with none of the kinds is a unit test; then every test must be exactly one
    kind, and the kind of the processes it starts (KIND_FIXTURES), or the run stops here."""
    for item in items:
        if not any(item.get_closest_marker(kind) for kind in KINDS):
            item.add_marker(pytest.mark.unit)
    problems = kind_problems(items)
    if problems:
        raise pytest.UsageError(
            "tests of no kind or of several (docs/testing.md, tests/conftest.py KINDS):\n"
            + "\n".join(problems[:20])
        )


def kind_problems(items: list[Any]) -> list[str]:
    """What is wrong with the kinds of these tests (pytest items): none or several of KINDS, or
    a fixture of one kind (KIND_FIXTURES) used by a test not marked with it."""
    problems = []
    for item in items:
        kinds = [kind for kind in KINDS if item.get_closest_marker(kind) is not None]
        if len(kinds) != 1:
            problems.append(f"{item.nodeid}: kinds {kinds}, must be exactly one of {list(KINDS)}")
        for fixture in getattr(item, "fixturenames", ()):
            kind = KIND_FIXTURES.get(fixture)
            if kind is not None and kind not in kinds:
                problems.append(
                    f"{item.nodeid}: uses the `{fixture}` fixture, so it is {kind}"
                    f" (pytestmark = pytest.mark.{kind})"
                )
    return problems


def pytest_unconfigure(config: pytest.Config) -> None:
    services.stop_session_server()


@pytest.fixture(scope="session")
def django_db_setup(
    request: pytest.FixtureRequest,
    django_test_environment: None,
    django_db_blocker: Any,
    django_db_keepdb: bool,
    django_db_createdb: bool,
    django_db_modify_db_settings: None,
) -> Iterator[None]:
    """Like pytest-django's, but always creates the default test database.

    pytest-django only creates it when some collected test is marked for the database; the
    end-to-end tests use it from a subprocess (the running gateway) without that marker.
    """
    from django.test.utils import setup_databases, teardown_databases

    keepdb = django_db_keepdb and not django_db_createdb
    with django_db_blocker.unblock():
        config = setup_databases(
            verbosity=request.config.option.verbose,
            interactive=False,
            keepdb=keepdb,
            aliases=["default"],
            serialized_aliases=[],
        )
    yield
    if not keepdb:
        with django_db_blocker.unblock():
            _disconnect_other_sessions()
            teardown_databases(config, verbosity=request.config.option.verbose)


def _disconnect_other_sessions() -> None:
    """Worker threads of in-process async tests keep persistent connections (CONN_MAX_AGE);
    PostgreSQL refuses to drop a database with sessions, so end them first."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
