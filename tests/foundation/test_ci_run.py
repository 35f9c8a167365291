"""`.ci/run` stopped with SIGTERM leaves nothing running, and its sentinel key goes to the
database REDIS_URL names (issue 33, item 7).

`make` is replaced (PATH) by a stand-in that starts a process in a session of its own, as the
suite starts its Celery workers and beat, records which sentinel keys it sees in REDIS_URL's
database, and then waits, as a long suite would. .ci/run gets SIGTERM; the stand-in's process
must be gone. The Redis is the test's own (never a developer's), on a database other than 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.services import MissingTool, RedisServer
from tests.waiting import wait_for
from tests.with_postgres import DEFAULT_URL, _reachable

ROOT = Path(__file__).resolve().parents[2]
FAKE_MAKE = """#!/usr/bin/env bash
python3 -c 'import os, sys, time
os.setsid()
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)' "$EZAT_FAKE_DIR/orphan.pid" &
redis-cli -u "$REDIS_URL" --scan --pattern 'ezat:ci:sentinel:*' > "$EZAT_FAKE_DIR/sentinels.tmp"
mv "$EZAT_FAKE_DIR/sentinels.tmp" "$EZAT_FAKE_DIR/sentinels"
wait
"""


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer.start()
    try:
        yield server
    finally:
        server.stop()


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.mark.timeout(300)
def test_sigterm_leaves_no_process_and_the_sentinel_follows_redis_url(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    database_url = os.environ.get("DATABASE_URL") or DEFAULT_URL
    why = _reachable(database_url)
    if why is not None:
        raise MissingTool(f".ci/run needs PostgreSQL at {database_url}: {why}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "make").write_text(FAKE_MAKE)
    (bin_dir / "make").chmod(0o755)
    url = redis_server.url(5)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "DATABASE_URL": database_url,
        "REDIS_URL": url,
        "EZAT_FAKE_DIR": str(tmp_path),
        "EZAT_CI_LOADED_PASS": "0",
        "EZAT_CI_EMBEDDED_PASS": "0",
    }
    ci = subprocess.Popen(
        ["bash", ".ci/run"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    orphan_file, sentinels = tmp_path / "orphan.pid", tmp_path / "sentinels"
    orphan = 0
    try:
        wait_for(lambda: orphan_file.exists() and sentinels.exists(), what="the stand-in make")
        orphan = int(orphan_file.read_text())
        assert _running(orphan)
        assert sentinels.read_text().split() == [f"ezat:ci:sentinel:{ci.pid}"]
        ci.send_signal(signal.SIGTERM)  # to .ci/run alone, as a CI runner cancelling it does
        output, _ = ci.communicate(timeout=120)
        assert ci.returncode == 143, output
        wait_for(lambda: not _running(orphan), what="the process in its own session to stop")
        # Cancelled runs remove their sentinel too.
        assert redis.Redis.from_url(url).keys("ezat:ci:sentinel:*") == []
    finally:
        if ci.poll() is None:
            os.killpg(ci.pid, signal.SIGKILL)
            ci.wait()
        if orphan and _running(orphan):
            os.kill(orphan, signal.SIGKILL)
