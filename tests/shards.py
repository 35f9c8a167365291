"""The suite's shards (scripts/test_shards.sh runs one pytest process per shard, side by side).

The tests mirror the product's tree (tests/<app>/, docs/testing.md), so a shard is a list of test
files, not a directory: each shard below names its files by glob patterns, and every test file
no pattern names lands in the last shard, `rest`, so a new file is never left out. A file named
by two shards, or a pattern that names no file, is an error (`python -m tests.shards check`,
tests/foundation/test_shards.py).

Each shard's files are given to pytest in the order a one-process run collects them (by path,
directory by directory, names sorted), so a shard runs a subsequence of that run: the order an
engineer gets from `pytest tests`, with pytest-django's stable sort by database use on top.

Balance: six shards, as the suite was balanced (and passed CI in ~12 min on 2 cores) before the
tree layout: the end-to-end files in three by file name (a-l, m, n-z: the same files under their
new paths), the long and mostly waiting ones together (benchmark smoke, instruction-count guard,
browser, foundation), the topologies, and the rest. An eight-shard split by area was tried: on 2
cores it ran longer (its slowest shard 14 min), and its browser tests, sharing a process with the
billing e2e tests, timed out. Measure from a full run's artifacts/junit-<shard>.xml (`python -m
tests.shards durations artifacts/junit-*.xml` prints each file's and each shard's time). A new
end-to-end file lands in `rest` until it is named here.

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
    # The end-to-end tests (each shard starts a stack of its own: a gateway, the simulators), in
    # three by file name, as they were balanced before the tree layout: a-l, m, n-z.
    "e2e-a": (
        "tests/accounts/test_key_lifecycle.py",
        "tests/billing/test_durable_usage.py",
        "tests/billing/test_group_commit.py",
        "tests/billing/test_limits_billing_usage.py",
        "tests/ezat/test_graceful_shutdown.py",
        "tests/gateway/handlers/test_agents_claude_code.py",
        "tests/gateway/handlers/test_agents_codex.py",
        "tests/gateway/handlers/test_agents_openai_sdk.py",
        "tests/gateway/handlers/test_chat_caching.py",
        "tests/gateway/handlers/test_chat_errors.py",
        "tests/gateway/handlers/test_chat_images.py",
        "tests/gateway/handlers/test_chat_request_mapping.py",
        "tests/gateway/handlers/test_chat_response.py",
        "tests/gateway/handlers/test_chat_streaming.py",
        "tests/gateway/handlers/test_chat_tools_thinking.py",
        "tests/gateway/handlers/test_hostile_input.py",
        "tests/gateway/images/test_image_memory_e2e.py",
        "tests/gateway/limits/test_limits_billing_limits.py",
        "tests/gateway/limits/test_limits_billing_round_trips.py",
        "tests/gateway/routing/test_bad_deployments.py",
        "tests/gateway/test_db_connections.py",
    ),
    "e2e-m": (
        "tests/gateway/handlers/test_messages_api.py",
        "tests/gateway/handlers/test_models_and_prices.py",
        "tests/gateway/limits/test_media_holds.py",
        "tests/gateway/routing/test_model_fallbacks.py",
    ),
    "e2e-n": (
        "tests/billing/test_request_log.py",
        "tests/billing/test_request_log_integrity.py",
        "tests/catalog/test_operator_api_deployments.py",
        "tests/core/test_redis_prefix.py",
        "tests/gateway/handlers/test_openai_chat_relay.py",
        "tests/gateway/handlers/test_openai_responses_relay.py",
        "tests/gateway/handlers/test_real_clients.py",
        "tests/gateway/handlers/test_responses_clients.py",
        "tests/gateway/handlers/test_responses_nul.py",
        "tests/gateway/handlers/test_responses_python_sdk.py",
        "tests/gateway/handlers/test_responses_state.py",
        "tests/gateway/handlers/test_responses_tools.py",
        "tests/gateway/handlers/test_responses_wire.py",
        "tests/gateway/handlers/test_tools_types.py",
        "tests/gateway/limits/test_stored_context_holds.py",
        "tests/gateway/providers/test_openai_cross_provider.py",
        "tests/gateway/providers/test_openai_documents.py",
        "tests/gateway/providers/test_openai_gemini_signatures.py",
        "tests/gateway/providers/test_openai_kinds.py",
        "tests/gateway/providers/test_openai_messages.py",
        "tests/gateway/providers/test_openai_pitfalls.py",
        "tests/gateway/providers/test_platform_credentials.py",
        "tests/gateway/providers/test_platform_lazy_imports.py",
        "tests/gateway/providers/test_platforms.py",
        "tests/gateway/routing/test_routing_capacity.py",
        "tests/gateway/routing/test_routing_cooldown.py",
        "tests/gateway/routing/test_routing_failover.py",
        "tests/gateway/routing/test_routing_sticky.py",
        "tests/gateway/routing/test_tenant_fairness.py",
        "tests/gateway/test_partial_streams.py",
        "tests/gateway/test_request_size.py",
        "tests/playground/test_playground_relay.py",
    ),
    # Long and mostly waiting: the benchmark smoke tests and the instruction-count guard, the
    # browser tests, the foundation tests (the quickstart among them).
    "slow": (
        "tests/bench/test_*.py",
        "tests/*/test_*_browser.py",
        "tests/foundation/test_*.py",
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
