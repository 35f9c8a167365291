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
