"""`make test` on the embedded default gives the suites that need PostgreSQL one (issue 33,
item 2): tests/with_postgres.py uses the local server when it answers, else a throwaway cluster
it removes afterwards, and leaves DATABASE_URL alone when it is set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg

from tests.services import MissingTool, free_port
from tests.with_postgres import DEFAULT_URL, _reachable

ROOT = Path(__file__).resolve().parents[2]
PRINT_URL = "import os; print('URL=' + os.environ.get('DATABASE_URL', ''))"


def _wrapped(**env: str) -> tuple[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)}
    result = subprocess.run(
        [sys.executable, "-m", "tests.with_postgres", sys.executable, "-c", PRINT_URL],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    url = next(line[4:] for line in result.stdout.splitlines() if line.startswith("URL="))
    return url, result.stdout


def test_a_set_database_url_is_kept() -> None:
    url, _ = _wrapped(DATABASE_URL="postgres://someone@db.example:5432/x")
    assert url == "postgres://someone@db.example:5432/x"


def test_the_local_server_when_it_answers() -> None:
    if (why := _reachable(DEFAULT_URL)) is not None:
        raise MissingTool(f"no PostgreSQL at {DEFAULT_URL}: {why}")
    url, out = _wrapped()
    assert url == DEFAULT_URL and "the server answers" in out


def test_else_a_throwaway_cluster_that_is_removed_after() -> None:
    nobody = f"postgres://postgres@127.0.0.1:{free_port()}/ezat"
    url, out = _wrapped(EZAT_TEST_POSTGRES_URL=nobody)
    if "no PostgreSQL for this shard" in out:
        raise MissingTool(f"no initdb to start a throwaway cluster with: {out}")
    assert url.startswith("postgres://postgres@127.0.0.1:") and url != nobody, out
    assert "throwaway cluster" in out
    try:
        psycopg.connect(url.replace("postgres://", "postgresql://", 1), connect_timeout=3).close()
    except psycopg.OperationalError:
        pass  # stopped with the command
    else:
        raise AssertionError(f"the throwaway cluster at {url} still answers")
