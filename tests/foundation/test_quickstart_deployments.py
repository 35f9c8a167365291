"""Every `make run` brings up exactly the deployments it prints, whatever ran before (issue 33,
item 1): a run with ANTHROPIC_API_KEY or with several simulated platforms used to leave the
plain run's `simulator` disabled, and every later plain `make run` answered 503.

Runs the quickstart's set-up step (EZAT_QUICKSTART_SETUP_ONLY=1: database, key, deployments, no
gateway) for a variant and then plain, on a SQLite file in a temporary directory, and reads the
enabled set from that file.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.services import free_port, free_port_block

ROOT = Path(__file__).resolve().parents[2]


def _set_up(tmp_path: Path, **variant: str) -> str:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("REDIS_URL", "ANTHROPIC_API_KEY", "CELERY_BROKER_URL", "EZAT_SIM_PLATFORMS")
    }
    env.update(
        DATABASE_URL=f"sqlite:///{tmp_path / 'quickstart.sqlite3'}",
        PORT=str(free_port()),
        # SIM_PORT and the two after it (the Bedrock and Vertex simulators of a variant run).
        SIM_PORT=str(free_port_block(3)),
        VAR_DIR=str(tmp_path / "var"),
        EZAT_SIM_STATE_DIR=str(tmp_path / "sim-state"),
        EZAT_QUICKSTART_SETUP_ONLY="1",
        **variant,
    )
    result = subprocess.run(
        ["bash", "scripts/quickstart.sh"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _enabled(tmp_path: Path) -> set[str]:
    with sqlite3.connect(tmp_path / "quickstart.sqlite3") as db:
        rows = db.execute("SELECT name FROM catalog_deployment WHERE enabled").fetchall()
    return {name for (name,) in rows}


@pytest.mark.timeout(1200)
def test_a_variant_run_does_not_break_the_plain_runs_after_it(tmp_path: Path) -> None:
    # The Anthropic simulator's OpenAI front serves the GPT-like model beside it (issue 30).
    plain = {"simulator", "simulator-openai"}
    _set_up(tmp_path)
    assert _enabled(tmp_path) == plain

    _set_up(tmp_path, ANTHROPIC_API_KEY="sk-ant-not-a-real-key")
    assert _enabled(tmp_path) == {"anthropic"}
    out = _set_up(tmp_path)
    assert _enabled(tmp_path) == plain, out

    _set_up(tmp_path, EZAT_SIM_PLATFORMS="anthropic,bedrock,vertex")
    assert _enabled(tmp_path) == plain | {"simulator-bedrock", "simulator-vertex"}
    _set_up(tmp_path, EZAT_SIM_PLATFORMS="bedrock")
    assert _enabled(tmp_path) == {"simulator-bedrock"}
    _set_up(tmp_path)
    assert _enabled(tmp_path) == plain
