"""Shared fixtures. End-to-end fixtures (running gateway + simulator) live in tests/e2e/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


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
