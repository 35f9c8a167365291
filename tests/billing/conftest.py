from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.billing.harness import WorkerPool


@pytest.fixture
def workers(transactional_db: None, tmp_path: Path) -> Iterator[WorkerPool]:
    """Real Celery workers on the committed test database; all killed before the DB is flushed."""
    pool = WorkerPool(tmp_path)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def restore_partitions(transactional_db: None) -> Iterator[None]:
    """Drops the partitions a test made (they are DDL: a flush keeps them), so later tests
    find the months as the migration left them. Runs before the flush of the test's rows."""
    from django.db import connection

    from billing import partitions

    if not partitions.enabled():
        yield
        return
    tables = (partitions.USAGE_TABLE, partitions.REQUEST_LOG_TABLE)
    before = {t: {p.name for p in partitions.partitions(t)} for t in tables}
    yield
    with connection.cursor() as cursor:
        for table in tables:
            for part in partitions.partitions(table):
                if part.name not in before[table]:
                    cursor.execute(f'ALTER TABLE "{table}" DETACH PARTITION "{part.name}"')
                    cursor.execute(f'DROP TABLE "{part.name}"')
