"""The instruction-count regression guard (issue 35 item 5): instructions per request and per
streamed event of the gateway's hot paths, against a committed baseline.

    python -m bench.icount --check          # recount; non-zero when a figure is > 1.10x baseline
    python -m bench.icount --update         # recount, rewrite bench/baselines/instructions.json
    python -m bench.icount --spread --runs 3  # recount 3 times, print the spread (no baseline)
    python -m bench.icount --check-commits  # every commit that changed the baseline says why

Timings move with everyone else's load on a shared machine; instruction counts do not. One
Python process (`bench.icount_driver`) runs under valgrind's callgrind and drives the gateway's
ASGI app in-process against the fake upstream (another process, not counted), on the embedded
default (SQLite, no Redis), with PYTHONHASHSEED fixed, its start-up and warm-up uninstrumented,
every cell in a section of its own. Per path: per request (JSON, and a stream of SHORT events)
and per streamed event (Δ between a stream of LONG and of SHORT events ÷ their difference).

The rule: CI (scripts/test_shards.sh, shard `slow`, tests/bench/test_icount_guard.py) fails when
a figure grows by more than 10 % over the committed baseline. When the growth is deliberate,
`--update` in the same commit, and that commit's message carries a line
`instructions: <why the path got dearer>` (checked by `--check-commits` for every commit that
ever changed the baseline file).
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench.icount_driver import cells
from bench.procs import BenchError, Procs

REPO = Path(__file__).resolve().parent.parent
BASELINE = REPO / "bench" / "baselines" / "instructions.json"
BASELINE_REL = "bench/baselines/instructions.json"
THRESHOLD = 1.10
SHORT, LONG = 16, 80  # events of the short and the long stream
REQUESTS = 4  # counted requests per cell
# Same hashing in every run: dict layouts (and so instruction counts) do not vary with the seed.
# And no clock-driven work inside the counted window (under callgrind a request takes ~50x its
# native time, so a 1 s timer would fire every few requests, a different number every run):
# every cache lifetime and flush interval an hour. The request-log rows are written when each
# cell ends (the driver drains the writer: one batch of REQUESTS rows per cell).
CHILD_ENV = {
    "PYTHONHASHSEED": "0",
    "EZAT_KEY_CACHE_TTL": "3600",
    "EZAT_CATALOG_POLL_INTERVAL": "3600",
    "EZAT_REQUEST_LOG_FLUSH_SECONDS": "3600",
    "EZAT_LIVE_FEED_FLUSH_SECONDS": "3600",
    "EZAT_MONEY_RESEED_SECONDS": "3600",
    "EZAT_CHECKPOINT_INTERVAL": "3600",
    "EZAT_CHECKPOINT_FIRST_WRITE_DELAY": "3600",
    "EZAT_CHECKPOINT_STALE_SECONDS": "7200",
    "EZAT_PING_INTERVAL": "3600",
    "EZAT_SLOT_HEARTBEAT_SECONDS": "3600",
    "EZAT_SLOT_LEASE_SECONDS": "7200",
}
CALLGRIND = [
    "valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-before=getppid",
    "--dump-instr=no", "--compress-strings=no", "--separate-threads=yes",
]  # fmt: skip
REASON_PREFIX = "instructions:"

Log = Callable[[str], None]


def _totals(path: Path) -> int:
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise BenchError(f"{path}: no totals line")


def main_thread_sections(out: Path) -> list[int]:
    """The main thread's count in each dump (`out.1-01`, `out.2-01`, ...: with
    --separate-threads, a `--dump-before` dump holds the thread that called the function)."""
    sections = []
    n = 1
    while (path := out.parent / f"{out.name}.{n}-01").exists():
        sections.append(_totals(path))
        n += 1
    return sections


def other_threads_total(out: Path) -> int:
    """Every other thread's count from instrumentation on to the exit (their final dumps,
    `out-02`, `out-03`, ...): the database writes' threads, which no section dump holds."""
    return sum(
        _totals(path) for path in out.parent.glob(f"{out.name}-*") if path.name[-3:] != "-01"
    )


def versions() -> dict[str, str]:
    """What the counts depend on beyond the code: a baseline only compares with a recount on
    the same interpreter, valgrind and platform."""
    valgrind = subprocess.run(
        ["valgrind", "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return {
        "python": platform.python_version(),
        "valgrind": valgrind,
        "platform": f"{platform.system()}-{platform.machine()}-{'-'.join(platform.libc_ver())}",
    }


def figures(names: list[str], sections: list[int], others: int, requests: int) -> dict[str, int]:
    """The guarded figures from per-cell counts: per request and per event, by path; and the
    other threads' per request over every cell."""
    by_cell = dict(zip(names, sections, strict=True))
    out: dict[str, int] = {}
    for name in dict.fromkeys(n.split("/")[0] for n in names):
        if f"{name}/json" in by_cell:
            out[f"{name} JSON, per request"] = round(by_cell[f"{name}/json"] / requests)
        short, long = by_cell[f"{name}/stream{SHORT}"], by_cell[f"{name}/stream{LONG}"]
        out[f"{name} stream ({SHORT} events), per request"] = round(short / requests)
        out[f"{name} stream, per event"] = round((long - short) / (LONG - SHORT) / requests)
    out["other threads (database writes), per request"] = round(others / len(names) / requests)
    return out


def _one_run(procs: Procs, env: dict[str, str], key: str, run: int) -> dict[str, int]:
    # A copy of the freshly set-up database for every run: SQLite's B-trees and WAL then start
    # from the same state each time, not from the previous run's rows.
    db = procs.tmp / f"icount-{run}.sqlite3"
    shutil.copyfile(procs.tmp / "bench.sqlite3", db)
    env = {**env, "EZAT_SQLITE_PATH": str(db), "DATABASE_URL": f"sqlite:///{db}"}
    out = procs.tmp / f"icount-{run}.cg"
    cmd = [*CALLGRIND, f"--callgrind-out-file={out}", sys.executable, "-m",
           "bench.icount_driver", "--callgrind", "--key", key, "--requests", str(REQUESTS),
           "--short", str(SHORT), "--long", str(LONG)]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, timeout=1200, check=False)
    if done.returncode != 0:
        raise BenchError(
            f"{' '.join(cmd)} failed ({done.returncode}):\n"
            f"{done.stdout.decode(errors='replace')[-2000:]}"
            f"{done.stderr.decode(errors='replace')[-4000:]}"
        )
    names = done.stdout.decode().strip().splitlines()[-1].split(",")
    expected = [cell.name for cell in cells("", SHORT, LONG)]
    if names != expected:
        raise BenchError(f"the driver ran {names}, expected {expected}")
    # Section 1 is switching instrumentation on; then per cell a collection and the cell.
    sections = main_thread_sections(out)[1:]
    if len(sections) != 2 * len(names):
        raise BenchError(f"{out}: {len(sections)} sections for {len(names)} cells")
    return figures(names, sections[1::2], other_threads_total(out), REQUESTS)


def child_env(gateway_env: dict[str, str], tmp: Path) -> dict[str, str]:
    """The driver's environment: the bench's gateway settings and CHILD_ENV, and none of the
    caller's own EZAT_ settings (a test session's, a developer's shell's), so that the counts
    do not depend on who runs the guard. The durable files go to the run's directory."""
    ours = {"EZAT_SQLITE_PATH"}
    env = {k: v for k, v in gateway_env.items() if not k.startswith("EZAT_") or k in ours}
    for name, sub in (("EZAT_USAGE_SPOOL_DIR", "spool"), ("EZAT_CHECKPOINT_DIR", "checkpoints"),
                      ("EZAT_REQUEST_LOG_QUARANTINE_DIR", "quarantine")):  # fmt: skip
        env[name] = str(tmp / sub)
    return {**env, **CHILD_ENV}


def count(runs: int, log: Log) -> list[dict[str, int]]:
    """`runs` recounts (each a fresh process on a fresh copy of one set-up database)."""
    with tempfile.TemporaryDirectory(prefix="ezat-icount-") as tmp:
        procs = Procs(tmp=Path(tmp) / "procs")
        procs.tmp.mkdir()
        try:
            up_port = procs.start_upstream(events=LONG, cpu=None, max_seconds=3600)
            env = child_env(procs.gateway_env("sqlite", redis=False), procs.tmp)
            key = procs.setup_gateway(env, up_port)
            results = []
            for run in range(runs):
                started = time.monotonic()
                results.append(_one_run(procs, env, key, run))
                log(f"run {run + 1}/{runs}: {time.monotonic() - started:.0f} s")
            return results
        finally:
            procs.close()


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def spread(results: list[dict[str, int]]) -> str:
    rows = [("figure", *(f"run {i + 1}" for i in range(len(results))), "spread")]
    for name in results[0]:
        values = [r[name] for r in results]
        low = min(values)
        gap = f"{(max(values) - low) / low * 100:.2f} %" if low else "-"
        rows.append((name, *(f"{v:,}" for v in values), gap))
    return _table(rows)


def compare(baseline: dict[str, Any], now: dict[str, int]) -> tuple[bool, str]:
    """(within the threshold, the table: path, baseline, now, ratio)."""
    rows = [("figure", "baseline", "now", "ratio", "")]
    ok = True
    for name in [*baseline["figures"], *(n for n in now if n not in baseline["figures"])]:
        base, cur = baseline["figures"].get(name), now.get(name)
        if base is None or cur is None:
            ok = False
            rows.append((name, f"{base or '-'}", f"{cur or '-'}", "-", "not in both: --update"))
            continue
        ratio = cur / base if base else float("inf")
        over = ratio > THRESHOLD
        ok = ok and not over
        rows.append(
            (name, f"{base:,}", f"{cur:,}", f"{ratio:.3f}", f"> {THRESHOLD:.2f}" if over else "")
        )
    return ok, _table(rows)


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()


def _how_to_update() -> str:
    return (
        "re-take it: `python -m bench.icount --update`, and commit bench/baselines/"
        f"instructions.json with a line `{REASON_PREFIX} <why>` in the commit message"
    )


def check(baseline_path: Path, log: Log, counts_from: Path | None, counts_out: Path | None) -> int:
    """Recount (or read the counts of an earlier recount) and compare with the baseline."""
    if not baseline_path.exists():
        print(f"FAIL: no baseline at {baseline_path}: {_how_to_update()}")
        return 1
    baseline = orjson.loads(baseline_path.read_bytes())
    if counts_from is not None:
        saved = orjson.loads(counts_from.read_bytes())
        here, now = saved["versions"], saved["figures"]
    else:
        here, now = versions(), {}
    differ = {k: (baseline["versions"].get(k), v) for k, v in here.items()}
    differ = {k: pair for k, pair in differ.items() if pair[0] != pair[1]}
    if differ:
        what = ", ".join(f"{k} {a!r} (baseline) vs {b!r} (here)" for k, (a, b) in differ.items())
        print(f"FAIL: the baseline was counted elsewhere: {what}. Counts only compare on the same "
              f"interpreter, valgrind and platform; {_how_to_update()}")  # fmt: skip
        return 1
    if counts_from is None:
        now = count(1, log)[0]
    if counts_out is not None:
        counts_out.write_bytes(orjson.dumps({"versions": here, "figures": now}))
    ok, table = compare(baseline, now)
    print(table)
    if ok:
        print(f"OK: every figure within {THRESHOLD:.2f}x of the baseline of {baseline['commit']}")
        return 0
    print(f"FAIL: a figure grew by more than {round((THRESHOLD - 1) * 100)} % over the baseline "
          f"of {baseline['commit']}. Make it cheaper, or if the cost is deliberate, "
          f"{_how_to_update()}")  # fmt: skip
    return 1


def update(runs: int, log: Log) -> int:
    results = count(runs, log)
    if runs > 1:
        print(spread(results))
    # The median of the runs (one run: its figures); counts are repeatable to well under 1 %.
    figures_now = {k: round(statistics.median(r[k] for r in results)) for k in results[0]}
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    baseline = {
        "about": "python -m bench.icount --update (bench/icount.py); instructions per request "
        f"and per event, {REQUESTS} requests per cell, streams of {SHORT} and {LONG} events",
        "commit": _git("rev-parse", "--short", "HEAD") + (" plus uncommitted changes" * dirty),
        "versions": versions(),
        "figures": figures_now,
    }
    BASELINE.parent.mkdir(parents=True, exist_ok=True)
    BASELINE.write_bytes(orjson.dumps(baseline, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"{BASELINE_REL} written; commit it with a line `{REASON_PREFIX} <why>` in the message")
    return 0


def commits_without_reason(log_text: str) -> list[str]:
    """From `git log --format=%h%x1f%B%x1e`: the commits whose message has no
    `instructions: <reason>` line."""
    missing = []
    for record in log_text.split("\x1e"):
        if not record.strip():
            continue
        sha, _, message = record.strip().partition("\x1f")
        reasons = [
            line[len(REASON_PREFIX) :].strip()
            for line in message.splitlines()
            if line.lower().startswith(REASON_PREFIX)
        ]
        if not any(reasons):
            missing.append(sha)
    return missing


def check_commits() -> int:
    # Merges are left out: the reason belongs to the commit that re-took the baseline.
    text = _git("log", "--no-merges", "--format=%h%x1f%B%x1e", "--", BASELINE_REL)
    missing = commits_without_reason(text)
    if missing:
        print(f"FAIL: these commits changed {BASELINE_REL} without a line `{REASON_PREFIX} "
              f"<reason>` in their message: {', '.join(missing)}")  # fmt: skip
        return 1
    print(f"OK: every commit that changed {BASELINE_REL} says why")
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--check", action="store_true", help="recount and compare")
    group.add_argument("--update", action="store_true", help="recount and rewrite the baseline")
    group.add_argument("--spread", action="store_true", help="recount --runs times, print spread")
    group.add_argument("--check-commits", action="store_true", help="the commit-message rule")
    parser.add_argument("--runs", type=int, default=1, help="recounts (--update, --spread)")
    parser.add_argument("--baseline", type=Path, default=BASELINE, help="--check against this")
    parser.add_argument("--counts-out", type=Path, help="--check: also save the recount here")
    parser.add_argument(
        "--counts-from", type=Path, help="--check: compare this saved recount, do not count"
    )
    args = parser.parse_args(argv)

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    if args.check_commits:
        sys.exit(check_commits())
    if args.check:
        sys.exit(check(args.baseline, log, args.counts_from, args.counts_out))
    if args.update:
        sys.exit(update(args.runs, log))
    print(spread(count(max(args.runs, 2), log)))


if __name__ == "__main__":
    main()
