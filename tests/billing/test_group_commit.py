"""Group-committed usage (EZAT_USAGE_COMMIT=group, issue 35 item 1) against a real gateway:
requests answered while PostgreSQL is down have their rows only in the gateway's fsync'd log;
the gateway is then SIGKILLed before any flush could reach the database. Nothing is lost: the
next process replays the dead one's log, every answered request is billed exactly once and has
its request-log row exactly once (those rows go through the same log), the log is gone
afterwards, and the ledger is clean."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from billing.spool import KIND_FIELD, REQUEST_LOG_KIND, read_records
from simulator.testing import SimulatorThread
from tests.support.durable_support import (
    Load,
    PrivatePostgres,
    base_id,
    durable_env,
    manage,
    seed,
    usage_rows,
    wait_for,
)
from tests.support.stack import GatewayProcess, start_gateway

pytestmark = pytest.mark.e2e


def test_sigkill_after_the_answer_and_before_the_flush_loses_nothing_and_bills_once(
    tmp_path: Path,
) -> None:
    pg = PrivatePostgres()
    sim = SimulatorThread(api_key="sk-sim-a").start()
    gateway: GatewayProcess | None = None
    restarted: GatewayProcess | None = None
    load: Load | None = None
    try:
        manage(pg.url, "migrate", "--noinput")
        seeded = seed(pg.url, sim.url, keys=1)
        org_id, (secret,) = seeded["org_id"], seeded["keys"]
        env = {
            **durable_env(tmp_path, "group"),
            "CELERY_TASK_ALWAYS_EAGER": "true",
            "EZAT_RECONCILE_INTERVAL": "1",
            "EZAT_KEY_CACHE_TTL": "120",  # the key stays cached through the outage
        }
        gateway = start_gateway(pg.url, "", tmp_path, extra_env=env)
        marker = f"group-kill-{uuid.uuid4().hex}"
        load = Load(gateway.url, secret, marker)
        load.start(["anthropic", "anthropic-stream", "openai", "openai-stream"])
        wait_for(lambda: sum(o.status == 200 for o in load.outcomes) >= 8, 120, "warm-up")

        # Rows flushed while the database is up: the log's flusher stores them.
        warm = {o.request_id for o in load.outcomes if o.status == 200}
        wait_for(
            lambda: warm <= {base_id(r["request_id"]) for r in usage_rows(pg.dsn(), org_id)},
            60,
            "the warm-up rows flushed",
        )

        pg.stop()
        down_at = time.time()
        wait_for(
            lambda: sum(o.status == 200 and o.started > down_at for o in load.outcomes) >= 8,
            120,
            "requests answered while PostgreSQL is down",
        )
        load.finish()
        outcomes = list(load.outcomes)
        answered = {o.request_id for o in outcomes if o.status == 200}
        during = [o for o in outcomes if o.status == 200 and o.started > down_at]
        logged = list((tmp_path / "spool").rglob("log-*.jsonl"))
        assert logged, "the answered requests' rows are in the log"
        # Their request-log rows too (written after the answer, not awaited: wait for them).
        wait_for(
            lambda: {o.request_id for o in during} <= logged_request_log_ids(tmp_path),
            60,
            "the request-log rows of the requests answered during the outage in the log",
        )
        assert not list((tmp_path / "spool").rglob("usage-*.jsonl"))  # the spool was not needed

        os.kill(gateway.process.pid, signal.SIGKILL)  # before any flush could succeed
        gateway.process.wait(30)
        gateway = None
        pg.start()
        restarted = start_gateway(pg.url, "", tmp_path, extra_env=env)

        def billed() -> list[dict[str, Any]] | None:
            rows = usage_rows(pg.dsn(), org_id)
            have = {base_id(r["request_id"]) for r in rows}
            left = list((tmp_path / "spool").rglob("log-*.jsonl"))
            return rows if answered <= have and not left else None

        rows = wait_for(billed, 120, "every answered request billed and the log replayed")
        log_counts: dict[str, int] = {}
        for rid in request_log_ids(pg.dsn(), org_id):
            log_counts[rid] = log_counts.get(rid, 0) + 1
        assert answered <= set(log_counts), "a request-log row was lost"
        assert all(log_counts[rid] == 1 for rid in answered), "a request-log row stored twice"
        counts: dict[str, int] = {}
        for row in rows:
            counts[base_id(row["request_id"])] = counts.get(base_id(row["request_id"]), 0) + 1
        lost = len(answered - set(counts))
        double_billed = sum(1 for rid in answered if counts.get(rid, 0) > 1)
        server_errors = [o for o in outcomes if o.status >= 500 and o.status != 503]
        print(  # the figures, for the run's log
            f"group commit kill: {len(answered)} answered ({len(during)} while PostgreSQL was "
            f"down, in {len(logged)} log file(s)); lost {lost}, double-billed {double_billed}"
        )
        assert server_errors == [], server_errors[:3]
        assert {o.kind for o in during} == {
            "anthropic",
            "anthropic-stream",
            "openai",
            "openai-stream",
        }
        assert (lost, double_billed) == (0, 0)
        assert all(r["cost_nano"] > 0 for r in rows)
        wait_for(
            lambda: all(r["ledger_entry_id"] for r in usage_rows(pg.dsn(), org_id)),
            120,
            "every record reconciled",
        )
        checked = manage(pg.url, "check_ledger", check=False)
        assert checked.returncode == 0, checked.stderr
        assert "no violations" in checked.stdout
    finally:
        if load is not None:
            load.finish()
        for process in (gateway, restarted):
            if process is not None:
                process.stop()
        sim.stop()
        pg.destroy()


def logged_request_log_ids(tmp_path: Path) -> set[str]:
    """The request ids of the request-log rows in the log's segments on disk."""
    ids = set()
    for path in (tmp_path / "spool").rglob("log-*.jsonl"):
        for record in read_records(path)[0]:
            if record.get(KIND_FIELD) == REQUEST_LOG_KIND:
                ids.add(str(record["request_id"]))
    return ids


def request_log_ids(dsn: str, org_id: int) -> list[str]:
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT request_id FROM billing_requestlog WHERE org_id = %s", (org_id,))
        return [str(row[0]) for row in cur.fetchall()]
