"""The suite's shards (scripts/test_shards.sh runs one pytest process per shard, side by side).

The tests mirror the product's tree (tests/<app>/, docs/testing.md), so a shard is a list of test
files, not a directory: each shard below names its files by glob patterns, and every test file
no pattern names lands in the last shard, `rest`, so a new file is never left out. A file named
by two shards, or a pattern that names no file, is an error (`python -m tests.shards check`,
tests/foundation/test_shards.py).

Each shard's files are given to pytest in the order a one-process run collects them (by path,
directory by directory, names sorted), so a shard runs a subsequence of that run: the order an
engineer gets from `pytest tests`, with pytest-django's stable sort by database use on top.

Balance (last measured 2026-12-07 on a 2-core box under a load of ~25, so every time ~3x CI's;
the run was stopped at 26 min, the shards then 55-100 % done): e2e-routing, rest and browser
were the longest, e2e-providers and e2e-responses the shortest, so tests/api and the gateway's
top-level modules moved to those two. Measured from a full run's artifacts/junit-<shard>.xml (`python -m tests.shards
durations artifacts/junit-*.xml` prints each file's and each shard's time). The end-to-end
files are the bulk; every shard that has any starts a stack (gateway and simulators) of its
own, so each shard takes whole areas rather than a few files of every area.

    python -m tests.shards names          the shard names, in start order
    python -m tests.shards files NAME     the test files of one shard, in run order
    python -m tests.shards check          fails unless every test file is in exactly one shard
    python -m tests.shards durations JUNIT...   seconds per file and per shard
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from fnmatch import fnmatchcase
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
# Client projects the e2e tests drive (npm and pip packages), not tests.
NOT_TESTS = ("tests/clients/",)
REST = "rest"

# Shard name -> glob patterns over paths from the repository root. In start order; `rest` last.
SHARDS: dict[str, tuple[str, ...]] = {
    # The translated and relayed APIs end to end: the largest area, in two.
    "e2e-chat": ("tests/gateway/handlers/test_[a-m]*.py",),
    "e2e-responses": (
        "tests/gateway/handlers/test_[n-z]*.py",
        "tests/gateway/test_*.py",
    ),
    "e2e-providers": (
        "tests/gateway/providers/test_*.py",
        "tests/gateway/images/test_*.py",
        "tests/gateway/protocols/test_*.py",
        "tests/api/test_*.py",
    ),
    "e2e-routing": (
        "tests/gateway/routing/test_*.py",
        "tests/gateway/limits/test_*.py",
    ),
    "slow": (
        "tests/bench/test_*.py",
        "tests/foundation/test_*.py",
    ),
    "browser": (
        "tests/*/test_*_browser.py",
        "tests/billing/test_*.py",
    ),
    # Three gateways behind HAProxy with Prometheus, a Redis Cluster and PgBouncer: minutes
    # each, waiting on their processes (scripts/test_shards.sh wraps this shard with
    # tests/with_postgres.py).
    "topology": ("tests/cluster/test_*.py", "tests/infra/test_*.py"),
    REST: (),
}


class ShardError(Exception):
    """The shard table does not put every test file in exactly one shard."""


def test_files() -> list[str]:
    """Every test file of the suite, repository-relative, in one-process collection order."""
    found = [
        path.relative_to(ROOT)
        for path in TESTS.rglob("test_*.py")
        if not path.relative_to(ROOT).as_posix().startswith(NOT_TESTS)
    ]
    # pytest collects a directory's entries sorted by name, files and directories alike.
    return [path.as_posix() for path in sorted(found, key=lambda path: path.parts)]


def assignment(files: list[str] | None = None) -> dict[str, list[str]]:
    """Shard name -> its files in run order; raises ShardError on a file in two shards or a
    pattern that names nothing."""
    files = test_files() if files is None else files
    shards: dict[str, list[str]] = {name: [] for name in SHARDS}
    problems = []
    used: set[tuple[str, str]] = set()
    for file in files:
        owners = []
        for name, patterns in SHARDS.items():
            hits = [pattern for pattern in patterns if fnmatchcase(file, pattern)]
            used.update((name, pattern) for pattern in hits)
            if hits:
                owners.append(name)
        if len(owners) > 1:
            problems.append(f"{file} is in shards {', '.join(owners)}")
        shards[owners[0] if owners else REST].append(file)
    for name, patterns in SHARDS.items():
        problems.extend(
            f"shard {name}: {pattern} names no test file"
            for pattern in patterns
            if (name, pattern) not in used
        )
    problems.extend(f"shard {name} has no test file" for name, got in shards.items() if not got)
    if problems:
        raise ShardError("\n".join(problems))
    return shards


def file_durations(junit_paths: list[str]) -> dict[str, float]:
    """Seconds per test file, summed over the test cases of the given JUnit reports."""
    seconds: dict[str, float] = defaultdict(float)
    # A directory without __init__.py (tests/cluster) reports its modules by file name alone.
    by_name: dict[str, list[str]] = defaultdict(list)
    for file in test_files():
        by_name[Path(file).stem].append(file)
    for junit in junit_paths:
        for case in ET.parse(junit).getroot().iter("testcase"):
            module = case.get("classname", "").split(".")
            # classname is the module's dotted path, then the class when there is one.
            for end in range(len(module), 0, -1):
                candidate = "/".join(module[:end]) + ".py"
                if (ROOT / candidate).exists() or len(by_name.get(module[end - 1], [])) == 1:
                    if not (ROOT / candidate).exists():
                        candidate = by_name[module[end - 1]][0]
                    seconds[candidate] += float(case.get("time") or 0)
                    break
    return dict(seconds)


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "check"
    try:
        shards = assignment()
    except ShardError as error:
        print(f"FATAL: the shards (tests/shards.py) are wrong:\n{error}", file=sys.stderr)
        return 1
    if command == "names":
        print("\n".join(shards))
    elif command == "files" and len(argv) == 2 and argv[1] in shards:
        print("\n".join(shards[argv[1]]))
    elif command == "check":
        print(f"{sum(map(len, shards.values()))} test files in {len(shards)} shards, each once")
    elif command == "durations":
        seconds = file_durations(argv[1:])
        for name, files in shards.items():
            print(f"{name}: {sum(seconds.get(file, 0) for file in files):.0f} s")
            for file in sorted(files, key=lambda file: -seconds.get(file, 0))[:8]:
                print(f"    {seconds.get(file, 0):7.1f} s  {file}")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
