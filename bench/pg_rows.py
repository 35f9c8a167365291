"""PostgreSQL backend CPU per usage row and per request-log row, as the gateway inserts them.

    DATABASE_URL=postgres://… python -m bench.pg_rows [--before billing.0007] [--rounds 16]

Scratch databases only (created next to DATABASE_URL's, dropped at the end): `after` is migrated
by this checkout; with `--before APP.MIGRATION` a second one is migrated by this checkout and
then back to that migration, so the schema before and after a change is measured in the same
run, interleaved round by round (the machine is shared: read the ratio).

Rows are built by the gateway's own code (recorder._fields/_row/_insert_sql for usage records,
request_log.db_row/insert_sql for log rows) and written as billing/pg_async.py writes them: one
autocommit connection with the same options, a batch of 1 as one prepared execute, larger batches
through psycopg's pipelined executemany. The backend's CPU is read from
/proc/<pg_backend_pid()>/schedstat (ns on CPU; /proc/<pid>/stat's utime+stime, in clock ticks,
is too coarse for a few thousand rows) around the measured batches, and divided by the rows.
PostgreSQL and this script must share the machine (a local server).

With --functions the run also reports plpgsql time per row (pg_stat_user_functions,
track_functions=all set in the measuring session): what the usage table's triggers cost.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parent.parent
TABLES = ("usage", "request_log")


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ezat.settings")
    import django

    django.setup()


def _backend_cpu_ns(pid: int) -> tuple[int, int]:
    """(ns on CPU from schedstat, utime+stime from stat in ns) of one backend process."""
    schedstat = int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return schedstat, ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def _db_url(base: str, name: str) -> str:
    head, _, _ = base.rpartition("/")
    return f"{head}/{name}"


def _migrate(url: str, *target: str) -> None:
    env = {**os.environ, "DATABASE_URL": url}
    subprocess.run(
        [sys.executable, "manage.py", "migrate", *target, "-v0"],
        cwd=REPO, env=env, check=True, timeout=600,
    )  # fmt: skip


@contextmanager
def scratch(names: list[str], keep: bool) -> Iterator[None]:
    import psycopg
    from django.db import connection

    params = dict(connection.get_connection_params())
    params["dbname"] = "postgres"
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    with psycopg.connect(**params, autocommit=True) as admin:
        for name in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
            admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield
    finally:
        if not keep:
            with psycopg.connect(**params, autocommit=True) as admin:
                for name in names:
                    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Target:
    """One scratch database and the gateway-shaped connection that writes into it."""

    def __init__(self, label: str, dbname: str) -> None:
        import psycopg

        from billing.pg_async import _connect_kwargs

        self.label = label
        params = _connect_kwargs()
        params["dbname"] = dbname
        self.conn = psycopg.connect(**params, autocommit=True)
        self.pid = self.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        org = self.conn.execute(
            "INSERT INTO accounts_organization (name, balance_nano, max_concurrency, created_at) "
            "VALUES (%s, 0, NULL, now()) RETURNING id",
            [f"pg-rows-{uuid.uuid4().hex[:8]}"],
        ).fetchone()[0]
        key = self.conn.execute(
            "INSERT INTO accounts_apikey (org_id, name, prefix, key_hash, created_at, "
            "spend_cap_period, allowed_models) "
            "VALUES (%s, 'bench', 'ezat-b', %s, now(), 'month', '[]') RETURNING id",
            [org, uuid.uuid4().hex],
        ).fetchone()[0]
        self.org, self.key = org, key

    def close(self) -> None:
        self.conn.close()


def _usage_fields(org: int, key: int) -> Callable[[], dict[str, Any]]:
    from django.utils import timezone

    from billing import recorder
    from catalog.pricing import Prices, PriceSchedule, TokenCounts

    prices = Prices.from_decimals(
        Decimal(3), Decimal(15), Decimal("0.3"), Decimal("3.75"), Decimal(6)
    )
    schedule = PriceSchedule.flat(prices, version=1)
    attempts = [{"model": "anthropic/claude-sonnet-5-5", "deployment": "bench", "outcome": "ok"}]

    def make() -> dict[str, Any]:
        data = recorder.UsageData(
            request_id=f"req_{uuid.uuid4().hex}", org_id=org, key_id=key, api="messages",
            stream=False, model_id="anthropic/claude-sonnet-5-5", model_name="sonnet",
            deployment="bench", tokens=TokenCounts(input=1000, output=64, cache_read=0),
            pricing=schedule, started_at=timezone.now() - timedelta(milliseconds=5),
            attempts=attempts, latency_ms=5, ttft_ms=None, requested_model="",
        )  # fmt: skip
        return recorder._fields(data, data.cost_nano)

    return make


def _log_fields(org: int, key: int) -> Callable[[], dict[str, Any]]:
    from django.utils import timezone

    attempts = [{"model": "anthropic/claude-sonnet-5-5", "deployment": "bench", "outcome": "ok"}]

    def make() -> dict[str, Any]:
        now = timezone.now()
        return {
            "request_id": f"req_{uuid.uuid4().hex}", "org_id": org, "api_key_id": key,
            "api": "messages", "stream": False, "model_name": "sonnet",
            "model_id": "anthropic/claude-sonnet-5-5",
            "requested_model": "anthropic/claude-sonnet-5-5", "deployment": "bench",
            "status": "ok", "http_status": 200, "error_type": "", "error_message": "",
            "finish_reason": "end_turn", "input_tokens": 1000, "output_tokens": 64,
            "cache_read_tokens": 0, "cache_write_5m_tokens": 0, "cache_write_1h_tokens": 0,
            "reasoning_tokens": 0, "cost_nano": 3_960_000, "output_exact": True,
            "hold_nano": 4_000_000, "attempts": attempts, "admitted_ms": 1, "ttft_ms": None,
            "latency_ms": 5, "count": 1, "started_at": now - timedelta(milliseconds=5),
            "created_at": now,
        }  # fmt: skip

    return make


def _writer(table: str, target: Target) -> tuple[str, Callable[[int], list[list[Any]]]]:
    """The table's INSERT and a maker of `n` fresh rows, both the gateway's own."""
    from django.utils import timezone

    from billing import recorder, request_log

    if table == "usage":
        make = _usage_fields(target.org, target.key)

        def usage_rows(n: int) -> list[list[Any]]:
            now = timezone.now()
            return [recorder._row(make(), now) for _ in range(n)]

        return recorder._insert_sql(), usage_rows
    make_log = _log_fields(target.org, target.key)

    def log_rows(n: int) -> list[list[Any]]:
        return [request_log.db_row(make_log()) for _ in range(n)]

    return request_log.insert_sql(), log_rows


def _insert(target: Target, sql: str, rows: list[list[Any]]) -> None:
    # As billing/pg_async.py AsyncPgInserter.insert, synchronously.
    from billing.pg_async import _prepare

    with target.conn.cursor() as cursor:
        if len(rows) == 1:
            cursor.execute(sql, rows[0], prepare=_prepare())
        else:
            cursor.executemany(sql, rows)


def _function_ms(target: Target) -> float:
    target.conn.execute("SELECT pg_stat_force_next_flush()")
    target.conn.execute("SELECT 1")  # the flush happens at the end of a statement
    row = target.conn.execute(
        "SELECT coalesce(sum(total_time), 0) FROM pg_stat_user_functions"
    ).fetchone()
    return float(row[0])


class Sample(NamedTuple):
    """µs per row: backend CPU (schedstat, stat), this client's CPU sending the rows (what the
    gateway's writer pays, rows already built), plpgsql (--functions)."""

    backend: float
    backend_stat: float
    client: float
    plpgsql: float | None


def measure(target: Target, table: str, size: int, rows: int, functions: bool) -> Sample:
    """One measurement of `rows` rows in batches of `size`."""
    sql, make = _writer(table, target)
    batches = max(1, rows // size)
    for _ in range(3):  # warm: prepared statements, caches, the month's partition
        _insert(target, sql, make(size))
    prepared = [make(size) for _ in range(batches)]
    fn_before = _function_ms(target) if functions else 0.0
    sched0, stat0 = _backend_cpu_ns(target.pid)
    client0 = time.thread_time_ns()
    for batch in prepared:
        _insert(target, sql, batch)
    client1 = time.thread_time_ns()
    sched1, stat1 = _backend_cpu_ns(target.pid)
    fn = (_function_ms(target) - fn_before) * 1000 / (batches * size) if functions else None
    n = batches * size
    return Sample(
        (sched1 - sched0) / 1000 / n, (stat1 - stat0) / 1000 / n, (client1 - client0) / 1000 / n, fn
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pg_rows", description=__doc__)
    parser.add_argument("--rows", type=int, default=1024, help="rows per measurement")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--sizes", default="1,16,64", help="batch sizes")
    parser.add_argument("--before", help="APP.MIGRATION: also measure the schema at it")
    parser.add_argument("--functions", action="store_true", help="plpgsql time per row too")
    parser.add_argument("--keep", action="store_true", help="keep the scratch databases")
    args = parser.parse_args(argv)
    _setup_django()
    from django.conf import settings
    from django.db import connection

    if connection.vendor != "postgresql":
        parser.error("DATABASE_URL must be a PostgreSQL database (its server, local)")
    base_url = os.environ["DATABASE_URL"]
    base_name = settings.DATABASES["default"]["NAME"]
    sizes = [int(s) for s in args.sizes.split(",")]
    labels = ["after"] + (["before"] if args.before else [])
    names = {label: f"{base_name}_pgrows_{label}" for label in labels}
    with scratch(list(names.values()), args.keep):
        for label in labels:
            _migrate(_db_url(base_url, names[label]))
        if args.before:
            app, _, migration = args.before.partition(".")
            _migrate(_db_url(base_url, names["before"]), app, migration)
        targets = [Target(label, names[label]) for label in labels]
        if args.functions:
            for target in targets:
                target.conn.execute("SET track_functions = 'all'")
        results: dict[tuple[str, str, int], list[Sample]] = {}
        started = time.monotonic()
        try:
            # Pairs measured back to back (the order alternating), so a neighbour's burst of
            # load hits both sides of a pair: the ratio is taken per pair, then the median.
            for table in TABLES:
                for size in sizes:
                    for rnd in range(args.rounds):
                        for target in targets if rnd % 2 == 0 else targets[::-1]:
                            key = (target.label, table, size)
                            m = measure(target, table, size, args.rows, args.functions)
                            results.setdefault(key, []).append(m)
        finally:
            for target in targets:
                target.close()
    print(
        f"# µs per row, median over {args.rounds} rounds of {args.rows} rows (min–max); "
        f"after ÷ before: median of the per-round ratios (interquartile range); "
        f"backend: PostgreSQL backend CPU (schedstat; stat: /proc/pid/stat ticks), client: this "
        f"process sending them; {time.monotonic() - started:.0f} s"
    )
    columns = ["table", "batch"]
    for label in labels:
        columns += [f"{label} backend", f"{label} client"]
    if args.before:
        columns += ["backend after ÷ before", "client after ÷ before"]
    if args.functions:
        columns += [f"{label} plpgsql" for label in labels]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for table in TABLES:
        for size in sizes:
            cells, backend, client = [], {}, {}
            for label in labels:
                samples = results[(label, table, size)]
                sched = [m.backend for m in samples]
                stat = statistics.median(m.backend_stat for m in samples)
                backend[label] = statistics.median(sched)
                client[label] = statistics.median(m.client for m in samples)
                cells.append(
                    f"{backend[label]:.1f} ({min(sched):.1f}–{max(sched):.1f}; stat {stat:.0f})"
                )
                cells.append(f"{client[label]:.1f}")
            if args.before:
                after, before = results[("after", table, size)], results[("before", table, size)]
                pairs = list(zip(after, before, strict=True))
                for part in ("backend", "client"):
                    ratios = sorted(getattr(a, part) / getattr(b, part) for a, b in pairs)
                    quarter = len(ratios) // 4
                    cells.append(
                        f"{statistics.median(ratios):.2f} "
                        f"({ratios[quarter]:.2f}–{ratios[-1 - quarter]:.2f})"
                    )
            if args.functions:
                cells += [
                    f"{statistics.median(m.plpgsql or 0.0 for m in results[(lb, table, size)]):.1f}"
                    for lb in labels
                ]
            print(f"| {table} | {size} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
