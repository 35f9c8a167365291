"""bench.limiter runs end to end on a private redis-server and reports both modes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_limiter_bench_reports_coalesced_writes_below_one_per_call() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "ezat.settings", "REDIS_URL": ""}
    out = subprocess.run(
        [sys.executable, "-m", "bench.limiter", "--requests", "64", "--rounds", "1"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    rows = [
        line.split("|")[1:-1]
        for line in out.splitlines()
        if line.startswith("| 1")  # C=1 and C=16
    ]
    cells = {(r[0].strip(), r[1].strip()): [c.strip() for c in r[2:]] for r in rows}
    assert set(cells) == {("1", "off"), ("1", "on"), ("16", "off"), ("16", "on")}
    writes = {k: float(v[2]) for k, v in cells.items()}
    assert writes[("1", "off")] == writes[("1", "on")] == 2.0  # admit + settle, one write each
    assert writes[("16", "off")] == 2.0
    assert writes[("16", "on")] < 1.0  # coalesced
