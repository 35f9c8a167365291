"""Helpers for the partitioning tests (PostgreSQL): raw rows, where a row lives, a scratch DB."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
import pytest
from django.db import connection

from billing import partitions
from tests.billing import harness

USAGE_COLUMNS = (
    "request_id, org_id, api, stream, model_id, model_name, requested_model, deployment, "
    "input_tokens, output_tokens, cache_read_tokens, cache_write_5m_tokens, "
    "cache_write_1h_tokens, reasoning_tokens, cost_nano, prices, output_exact, status, attempts, "
    "latency_ms, started_at, created_at"
)
USAGE_VALUES = "%s, %s, 'messages', false, 'm', 'm', 'm', 'd', 10, 5, 0, 0, 0, 0, %s, '{}', true, 'ok', '[]', 1, %s, %s"
LOG_COLUMNS = (
    "request_id, org_id, api, stream, model_name, model_id, requested_model, deployment, status, "
    "http_status, error_type, error_message, finish_reason, input_tokens, output_tokens, "
    "cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens, reasoning_tokens, cost_nano, "
    "output_exact, hold_nano, attempts, latency_ms, count, started_at, created_at"
)
LOG_VALUES = "%s, %s, 'messages', false, 'm', 'm', 'm', 'd', 'ok', 200, '', '', '', 10, 5, 0, 0, 0, 0, %s, true, 0, '[]', 1, 1, %s, %s"


def require_postgres() -> None:
    if connection.vendor != "postgresql":
        pytest.skip(
            "partitioning is PostgreSQL's; SQLite keeps plain tables, whose row-deleting "
            "retention is tests/api/test_request_log_ops.py's"
        )


def insert_usage(cursor: Any, org_id: int, request_id: str, at: datetime, cost: int = 7) -> None:
    cursor.execute(
        f"INSERT INTO billing_usagerecord ({USAGE_COLUMNS}) VALUES ({USAGE_VALUES})",
        [request_id, org_id, cost, at, at],
    )


def insert_log(cursor: Any, org_id: int, request_id: str, at: datetime, cost: int = 7) -> None:
    cursor.execute(
        f"INSERT INTO billing_requestlog ({LOG_COLUMNS}) VALUES ({LOG_VALUES}) "
        "ON CONFLICT DO NOTHING",
        [request_id, org_id, cost, at, at],
    )


def home_of(table: str, request_id: str) -> list[str]:
    """The partitions holding `table`'s rows with this request id."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT tableoid::regclass::text FROM {table} WHERE request_id = %s ORDER BY id",
            [request_id],
        )
        return [row[0] for row in cursor.fetchall()]


def partition_names(table: str) -> list[str]:
    return [p.name for p in partitions.partitions(table)]


def _admin_dsn(dbname: str) -> str:
    s = connection.settings_dict
    return psycopg.conninfo.make_conninfo(
        dbname=dbname,
        user=s["USER"] or "postgres",
        password=s["PASSWORD"] or None,
        host=s["HOST"] or "127.0.0.1",
        port=s["PORT"] or 5432,
    )


@contextmanager
def scratch_database() -> Iterator[tuple[str, str]]:
    """A new empty database of its own (name, DSN), dropped afterwards."""
    name = f"ezat_part_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_admin_dsn("postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name, _admin_dsn(name)
    finally:
        with psycopg.connect(_admin_dsn("postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def migrate_to(env: dict[str, str], *target: str) -> subprocess.CompletedProcess[str]:
    """`manage.py migrate [target]` in a child process with `env` (its own DATABASE_URL)."""
    return subprocess.run(
        [sys.executable, "manage.py", "migrate", *target, "-v0"],
        cwd=harness.BASE_DIR, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def dsn_url(name: str) -> str:
    """A DATABASE_URL for database `name` on this test run's PostgreSQL server."""
    s = connection.settings_dict
    host, port = s["HOST"] or "127.0.0.1", s["PORT"] or 5432
    auth = s["USER"] or "postgres"
    if s["PASSWORD"]:
        auth += f":{s['PASSWORD']}"
    return f"postgres://{auth}@{host}:{port}/{name}"
