"""The instruction-count guard (bench.icount, issue 35 item 5): CI recounts the hot paths under
callgrind once, and fails when a figure is more than 1.10x the committed baseline, when the
baseline comes from another interpreter / valgrind / platform, or when a commit changed the
baseline without an `instructions: <reason>` line.

One real recount (`test_the_hot_paths_are_within_the_baseline`, ~30-60 s of valgrind); the
other checks compare that recount, saved, against doctored baselines without counting again."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench import icount
from tests.services import MissingTool

REPO = Path(__file__).resolve().parents[2]


def _guard(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.icount", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )


@dataclass(frozen=True)
class Recount:
    saved: Path  # its figures and versions (`--counts-out`)
    result: subprocess.CompletedProcess[str]  # `--check` against the committed baseline


@pytest.fixture(scope="module")
def recount(tmp_path_factory: pytest.TempPathFactory) -> Recount:
    """One recount of every path against the committed baseline (the CI guard itself)."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise MissingTool("the instruction-count guard needs valgrind (apt-get install valgrind)")
    saved = tmp_path_factory.mktemp("icount") / "counts.json"
    done = _guard("--check", "--counts-out", str(saved))
    assert saved.exists(), done.stdout + done.stderr
    return Recount(saved, done)


def _doctored(tmp_path: Path, saved: Path, **changes: Any) -> Path:
    """A baseline made from the recount: the same versions, figures scaled or replaced."""
    data = orjson.loads(saved.read_bytes())
    figures = {k: round(v / changes.get("grow", 1.0)) for k, v in data["figures"].items()}
    baseline = {"commit": "doctored", "versions": {**data["versions"], **changes.get("versions", {})},
                "figures": figures}  # fmt: skip
    path = tmp_path / "baseline.json"
    path.write_bytes(orjson.dumps(baseline))
    return path


def test_the_hot_paths_are_within_the_baseline(recount: Recount) -> None:
    done = recount.result
    assert done.returncode == 0, (
        "bench.icount --check failed: a hot path got dearer (see the table), or the baseline "
        "is stale. If the cost is deliberate: `python -m bench.icount --update` and commit "
        f"with a line `instructions: <why>`\n{done.stdout}\n{done.stderr[-3000:]}"
    )
    for figure in orjson.loads(icount.BASELINE.read_bytes())["figures"]:
        assert figure in done.stdout


def test_a_growth_above_ten_percent_fails(recount: Recount, tmp_path: Path) -> None:
    done = _guard("--check", "--counts-from", str(recount.saved),
                  "--baseline", str(_doctored(tmp_path, recount.saved, grow=1.12)))  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL: a figure grew by more than 10 %" in done.stdout
    assert "relay stream, per event" in done.stdout and "> 1.10" in done.stdout
    assert "instructions: <why>" in done.stdout  # how to re-baseline


def test_a_growth_within_ten_percent_passes(recount: Recount, tmp_path: Path) -> None:
    done = _guard("--check", "--counts-from", str(recount.saved),
                  "--baseline", str(_doctored(tmp_path, recount.saved, grow=1.08)))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "> 1.10" not in done.stdout


def test_a_baseline_from_another_interpreter_fails_loudly(recount: Recount, tmp_path: Path) -> None:
    baseline = _doctored(tmp_path, recount.saved, versions={"python": "3.10.0"})
    done = _guard("--check", "--counts-from", str(recount.saved), "--baseline", str(baseline))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "python '3.10.0' (baseline)" in done.stdout
    assert "python -m bench.icount --update" in done.stdout


def test_compare_flags_each_figure_over_the_threshold() -> None:
    baseline = {"figures": {"a": 1000, "b": 1000, "gone": 5}}
    ok, table = icount.compare(baseline, {"a": 1100, "b": 1101, "new": 7})
    assert not ok
    lines = {line.split()[0]: line for line in table.splitlines()[1:]}
    assert "1.100" in lines["a"] and "> 1.10" not in lines["a"]
    assert "1.101" in lines["b"] and "> 1.10" in lines["b"]
    assert "not in both" in lines["gone"] and "not in both" in lines["new"]
    assert icount.compare({"figures": {"a": 1000}}, {"a": 900})[0]


def test_figures_are_per_request_and_per_event() -> None:
    names = ["p/json", f"p/stream{icount.SHORT}", f"p/stream{icount.LONG}"]
    span = icount.LONG - icount.SHORT
    sections = [4000, 8000, 8000 + 4 * 10 * span]
    got = icount.figures(names, sections, others=1200, requests=4)
    assert got == {
        "p JSON, per request": 1000,
        f"p stream ({icount.SHORT} events), per request": 2000,
        "p stream, per event": 10,
        "other threads (database writes), per request": 100,
    }


def test_callgrind_files_are_read_per_section_and_thread(tmp_path: Path) -> None:
    out = tmp_path / "cg"
    for name, total in (("cg.1-01", 5), ("cg.2-01", 7), ("cg.2-02", 1000), ("cg-01", 9),
                        ("cg-02", 30), ("cg-03", 12)):  # fmt: skip
        (tmp_path / name).write_text(f"version: 1\ncmd: python\nsummary: {total}\n")
    assert icount.main_thread_sections(out) == [5, 7]
    assert icount.other_threads_total(out) == 42


def test_a_commit_changing_the_baseline_must_say_why() -> None:
    log = "abc1\x1fbench: faster\n\ninstructions: the relay parses once\n\x1e\n" \
          "abc2\x1fbench: rebaseline\n\x1e\nabc3\x1fx\nInstructions:   \n\x1e"  # fmt: skip
    assert icount.commits_without_reason(log) == ["abc2", "abc3"]


def test_every_commit_that_changed_the_baseline_says_why() -> None:
    done = _guard("--check-commits")
    assert done.returncode == 0, done.stdout + done.stderr


def test_spread_is_the_range_over_the_lowest() -> None:
    table = icount.spread([{"a": 1000, "z": 0}, {"a": 1010, "z": 0}, {"a": 1005, "z": 0}])
    assert table.splitlines()[1].split()[-2:] == ["1.00", "%"]
    assert table.splitlines()[2].split()[-1] == "-"
