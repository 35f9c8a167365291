"""`python -m ezat.serve` (the Docker image's command and `make run`): how many workers it starts.

The production shape (REDIS_URL set) gets one worker per usable core; the embedded default stays
at one worker, because its limits live in the process, and refuses more.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ezat.serve import ServeError, command, usable_cpus, worker_count

REPO = Path(__file__).resolve().parents[2]


def test_production_shape_starts_one_worker_per_core() -> None:
    assert worker_count({"REDIS_URL": "redis://r:6379/0"}, cpus=4) == 4
    assert worker_count({"REDIS_URL": "redis://r:6379/0"}, cpus=1) == 1


def test_embedded_default_stays_at_one_worker() -> None:
    assert worker_count({}, cpus=8) == 1
    assert worker_count({"REDIS_URL": "  "}, cpus=8) == 1


def test_the_setting_overrides_the_default() -> None:
    assert worker_count({"REDIS_URL": "redis://r/0", "EZAT_WORKERS": "3"}, cpus=8) == 3
    assert worker_count({"REDIS_URL": "redis://r/0", "EZAT_WORKERS": "1"}, cpus=8) == 1
    assert worker_count({"EZAT_WORKERS": "1"}, cpus=8) == 1


@pytest.mark.parametrize(
    ("value", "message"),
    [("two", "whole number"), ("0", "between 1 and 64"), ("65", "between 1 and 64")],
)
def test_bad_worker_counts_are_refused_naming_the_setting(value: str, message: str) -> None:
    with pytest.raises(ServeError, match=f"EZAT_WORKERS.*{message}"):
        worker_count({"REDIS_URL": "redis://r/0", "EZAT_WORKERS": value}, cpus=2)


def test_several_workers_without_redis_are_refused() -> None:
    with pytest.raises(ServeError, match="EZAT_WORKERS=2 needs REDIS_URL"):
        worker_count({"EZAT_WORKERS": "2"}, cpus=2)


def test_cgroup_quota_caps_the_core_count(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # docker run --cpus 1.5
    assert usable_cpus(tmp_path) == min(2, usable_cpus(tmp_path / "none"))
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cpus(tmp_path) == usable_cpus(tmp_path / "none")


def test_command_is_uvicorn_with_the_worker_count_and_extra_args() -> None:
    cmd = command("127.0.0.1", 8123, 2, ["--backlog", "4096"])
    assert cmd[1:4] == ["-m", "uvicorn", "ezat.asgi:application"]
    assert cmd[cmd.index("--workers") + 1] == "2"
    assert cmd[cmd.index("--port") + 1] == "8123"
    assert cmd[-2:] == ["--backlog", "4096"]


def _dry_run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ezat.serve", "--dry-run"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_dry_run_and_refusal() -> None:
    base = {"PATH": "/usr/bin:/bin", "SECRET_KEY": "x" * 50}
    done = _dry_run({**base, "REDIS_URL": "redis://127.0.0.1:1/0", "EZAT_WORKERS": "2"})
    assert done.returncode == 0, done.stderr
    assert "--workers 2" in done.stdout
    done = _dry_run({**base, "REDIS_URL": "", "EZAT_WORKERS": "2"})
    assert done.returncode == 1
    assert "EZAT_WORKERS=2 needs REDIS_URL" in done.stderr


def test_docker_image_and_make_run_start_through_ezat_serve() -> None:
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    assert 'CMD ["python", "-m", "ezat.serve"' in dockerfile
    assert "-m ezat.serve" in (REPO / "scripts" / "quickstart.sh").read_text()
