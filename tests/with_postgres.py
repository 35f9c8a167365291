"""Run a command (a pytest shard) with a PostgreSQL behind DATABASE_URL, for the suites that
need one (tests/cluster, tests/infra) when `make test` runs on the embedded default.

    python -m tests.with_postgres pytest tests/cluster tests/infra ...

DATABASE_URL already set: the command runs as it is. Otherwise the first of:
- the server at EZAT_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/ezat), when it
  answers within a few seconds;
- a throwaway cluster (initdb + pg_ctl in a temporary directory, tests/support/durable_support.py),
  removed when the command ends;
- neither: the command runs on SQLite and those suites skip, saying why (in CI they fail:
  tests/services.py `strict()`).
Every choice is printed, so a skipped suite is never a silent one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType

import psycopg

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/ezat"


def _reachable(url: str) -> str | None:
    """None when a connection to the server of `url` works, else why not."""
    server = url.rsplit("/", 1)[0] + "/postgres"
    try:
        with psycopg.connect(server.replace("postgres://", "postgresql://", 1), connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _run(command: list[str], env: dict[str, str]) -> int:
    child = subprocess.Popen(command, env=env)

    def forward(signum: int, frame: FrameType | None) -> None:
        child.send_signal(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, forward)
    return child.wait()


def main(command: list[str]) -> int:
    if not command:
        print("usage: python -m tests.with_postgres COMMAND...", file=sys.stderr)
        return 2
    env = dict(os.environ)
    if env.get("DATABASE_URL"):
        return _run(command, env)
    url = env.get("EZAT_TEST_POSTGRES_URL") or DEFAULT_URL
    why = _reachable(url)
    if why is None:
        print(
            f"==> PostgreSQL for this shard: {url} (DATABASE_URL unset; the server answers)",
            flush=True,
        )
        return _run(command, {**env, "DATABASE_URL": url})
    from tests.services import ServiceError
    from tests.support.durable_support import PrivatePostgres

    try:
        private = PrivatePostgres()
    except (ServiceError, KeyError, OSError) as exc:  # KeyError: no `postgres` user under root
        print(
            f"==> no PostgreSQL for this shard: {url} is unreachable ({why}) and no throwaway "
            f"cluster could start ({exc}); the tests that need it will be skipped",
            flush=True,
        )
        return _run(command, env)
    print(
        f"==> PostgreSQL for this shard: a throwaway cluster at {private.url} ({url}: {why})",
        flush=True,
    )
    try:
        return _run(command, {**env, "DATABASE_URL": private.url})
    finally:
        private.destroy()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
