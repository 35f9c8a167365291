"""Why DB_TRANSACTION_POOLING exists, shown on a real PgBouncer in transaction mode: a prepared
statement lives on the server session that prepared it, and the next transaction of the same
client may run on another one. The usage writer's connection (billing/pg_async.py) prepares
nothing with the setting on, and breaks without it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from billing.pg_async import AsyncPgInserter
from tests import services
from tests.infra.harness import PgBouncer

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def pgbouncer(django_db_setup: None) -> Iterator[PgBouncer]:
    from django.db import connection

    services.require_postgresql("tests/infra")
    s = connection.settings_dict
    bouncer = PgBouncer(
        host=s["HOST"] or "127.0.0.1", port=int(s["PORT"] or 5432), user=s["USER"] or "postgres"
    )
    yield bouncer
    bouncer.stop()


@pytest.fixture
def through_pgbouncer(pgbouncer: PgBouncer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer's connection parameters (Django's, for the test database) via the pooler."""
    from django.db import connection

    monkeypatch.setitem(connection.settings_dict, "HOST", "127.0.0.1")
    monkeypatch.setitem(connection.settings_dict, "PORT", pgbouncer.port)


async def _alternate(rounds: int) -> None:
    """Two writers (two client connections), one after the other, each with its own statement:
    PgBouncer hands each the server session the other just released."""
    writers = [AsyncPgInserter(), AsyncPgInserter()]
    try:
        for n in range(rounds):
            for i, writer in enumerate(writers):
                await writer.insert(f"SELECT %s::int + {i}", [[n]])
    finally:
        for writer in writers:
            writer.close()


async def test_the_usage_writer_prepares_nothing_with_transaction_pooling(
    through_pgbouncer: None, settings: Any
) -> None:
    settings.DB_TRANSACTION_POOLING = True
    await _alternate(20)


async def test_without_the_setting_prepared_statements_break_behind_pgbouncer(
    through_pgbouncer: None, settings: Any
) -> None:
    settings.DB_TRANSACTION_POOLING = False
    with pytest.raises(psycopg.errors.ProgrammingError, match="prepared statement"):
        await _alternate(20)
